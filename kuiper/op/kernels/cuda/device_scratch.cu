#include "kuiper/op/kernels/cuda/device_scratch.cuh"

#include "kuiper/base/cuda_utils.h"
#include "kuiper/base/device.h"

namespace kuiper::op::cuda {

StatusOr<void*> DeviceScratch::get(size_t bytes) {
  bool fresh = false;
  return get(bytes, fresh);
}

StatusOr<void*> DeviceScratch::get_zeroed(size_t bytes, void* stream) {
  bool fresh = false;
  KUIPER_ASSIGN_OR_RETURN(void* ptr, get(bytes, fresh));
  if (fresh) {
    KUIPER_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr, 0, bytes, as_cuda_stream(stream)));
  }
  return ptr;
}

StatusOr<void*> DeviceScratch::get(size_t bytes, bool& fresh) {
  int device = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) {
    return unsupported("device scratch supports " + std::to_string(kMaxDevices) + " GPUs");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Block& block = blocks_[device];
  fresh = false;
  if (block.bytes >= bytes && block.ptr != nullptr) return block.ptr;
  KUIPER_ASSIGN_OR_RETURN(Allocator * pool, cuda_allocator());
  // The old block goes back to the pool; work already queued on the stream still finishes
  // before anything queued after this call can reuse it.
  if (block.ptr != nullptr) pool->release(block.ptr, block.bytes);
  block = Block{};
  KUIPER_ASSIGN_OR_RETURN(void* ptr, pool->allocate(bytes));
  block = Block{ptr, bytes};
  fresh = true;
  return ptr;
}

}  // namespace kuiper::op::cuda
