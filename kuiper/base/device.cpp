// The part of device.h that is the same with and without CUDA.
#include "kuiper/base/device.h"

namespace kuiper {

StatusOr<Allocator*> allocator_for(DeviceType device) {
  if (device == DeviceType::kCPU) return &cpu_allocator();
  return cuda_allocator();
}

}  // namespace kuiper
