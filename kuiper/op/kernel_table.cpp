#include "kuiper/op/kernel_table.h"

namespace kuiper::op {

const KernelTable& kernel_table(DeviceType device) {
  return device == DeviceType::kCPU ? cpu_kernel_table() : cuda_kernel_table();
}

}  // namespace kuiper::op
