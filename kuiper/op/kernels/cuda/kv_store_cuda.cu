// Writes k, v rows into the caches at their positions, rounding to the caches' dtype. Positions
// are read on the device; a row whose position lies outside the cache is not written.
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

template <typename T>
__global__ void kv_store_kernel(const float* k, const float* v, const int32_t* positions,
                                int64_t tokens, int64_t kv_dim, int64_t context, T* k_cache,
                                T* v_cache) {
  const int64_t total = tokens * kv_dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / kv_dim;
    const int32_t pos = positions[t];
    if (pos < 0 || pos >= context) continue;
    const int64_t dst = static_cast<int64_t>(pos) * kv_dim + i % kv_dim;
    k_cache[dst] = from_float<T>(k[i]);
    v_cache[dst] = from_float<T>(v[i]);
  }
}

}  // namespace

Status kv_store(const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& k_cache,
                Tensor& v_cache, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(k, DataType::kFP32, "kv_store k"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(v, DataType::kFP32, "kv_store v"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(positions, DataType::kINT32, "kv_store positions"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(k_cache, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(v_cache, k_cache.dtype(), "value cache"));
  const int64_t kv_dim = k_cache.dim(-1), tokens = positions.numel();
  if (k.numel() != tokens * kv_dim || v.numel() != k.numel() ||
      v_cache.numel() != k_cache.numel()) {
    return invalid_argument("kv_store shapes do not fit: k " + k.describe() + ", cache " +
                            k_cache.describe());
  }
  const int64_t total = tokens * kv_dim;
  if (total == 0) return ok_status();
  return dispatch_float_type(k_cache.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kv_store_kernel<T><<<elementwise_blocks(total), kElementwiseThreads, 0,
                         as_cuda_stream(ctx.stream())>>>(k.data<float>(), v.data<float>(),
                                                   positions.data<int32_t>(), tokens, kv_dim,
                                                   k_cache.dim(0), k_cache.data<T>(),
                                                   v_cache.data<T>());
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("kv_store");
    return ok_status();
  });
}

}  // namespace kuiper::op::cuda
