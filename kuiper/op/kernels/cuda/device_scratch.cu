#include "kuiper/op/kernels/cuda/device_scratch.cuh"

#include "kuiper/base/cuda_utils.h"
#include "kuiper/base/device.h"

namespace kuiper::op::cuda {

StatusOr<void*> DeviceScratch::get(size_t bytes) {
  int device = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) {
    return unsupported("device scratch supports " + std::to_string(kMaxDevices) + " GPUs");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Block& block = blocks_[device];
  if (block.bytes >= bytes && block.ptr != nullptr) return block.ptr;
  KUIPER_ASSIGN_OR_RETURN(Allocator * pool, cuda_allocator());
  // The old block goes back to the pool; work already queued on the stream still finishes
  // before anything queued after this call can reuse it.
  if (block.ptr != nullptr) pool->release(block.ptr, block.bytes);
  block = Block{};
  KUIPER_ASSIGN_OR_RETURN(void* ptr, pool->allocate(bytes));
  block = Block{ptr, bytes};
  return ptr;
}

}  // namespace kuiper::op::cuda
