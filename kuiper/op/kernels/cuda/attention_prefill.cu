// Launches the tensor-core prefill attention: one block per (head, 64 query rows), sized from
// host-side shapes only; how many cache rows each block reads is decided on the device from
// the positions.
#include <cmath>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/attention_prefill.cuh"
#include "kuiper/op/kernels/cuda/attention_prefill_kernel.cuh"
#include "kuiper/op/kernels/cuda/cuda_backend.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {
namespace {

template <typename T, int kHeadDim>
Status launch(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
              const Tensor& positions, const AttentionShape& shape, Tensor& out,
              const ExecutionContext& ctx) {
  constexpr size_t shared_bytes = prefill_shared_bytes<kHeadDim>();
  // The tiles exceed the 48 KiB a kernel gets without asking.
  KUIPER_RETURN_IF_ERROR(configure_kernel_once(
      ctx, reinterpret_cast<const void*>(prefill_attention_kernel<T, kHeadDim>), [] {
        KUIPER_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(prefill_attention_kernel<T, kHeadDim>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(shared_bytes)));
        return ok_status();
      }));
  PrefillParams<T> p{};
  p.q = q.data<float>();
  p.k_cache = k_cache.data<T>();
  p.v_cache = v_cache.data<T>();
  p.positions = positions.data<int32_t>();
  p.out = attention_output(out);
  p.tokens = static_cast<int>(positions.numel());
  p.n_heads = shape.n_heads;
  p.group = shape.group();
  p.context = k_cache.dim(0);
  p.kv_dim = k_cache.dim(-1);
  p.q_scale = static_cast<float>(M_LOG2E / std::sqrt(static_cast<double>(kHeadDim)));
  const dim3 grid(static_cast<unsigned>(shape.n_heads),
                  static_cast<unsigned>((p.tokens + kPrefillQueryRows - 1) / kPrefillQueryRows));
  prefill_attention_kernel<T, kHeadDim><<<grid, kPrefillThreads, shared_bytes, as_cuda_stream(ctx.stream())>>>(p);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("prefill attention");
  return ok_status();
}

template <typename T>
Status launch_for_head_dim(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& positions, const AttentionShape& shape, Tensor& out,
                           const ExecutionContext& ctx) {
  return shape.head_dim == 64
             ? launch<T, 64>(q, k_cache, v_cache, positions, shape, out, ctx)
             : launch<T, 128>(q, k_cache, v_cache, positions, shape, out, ctx);
}

}  // namespace

bool tensor_core_prefill_fits(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const AttentionShape& shape, const Tensor& out) {
  const DataType type = k_cache.dtype();
  return (type == DataType::kBF16 || type == DataType::kFP16) &&
         (shape.head_dim == 64 || shape.head_dim == 128) && aligned_to(k_cache.raw_data(), 16) &&
         aligned_to(v_cache.raw_data(), 16) && aligned_to(q.raw_data(), 8) && aligned_to(out.raw_data(), 8);
}

Status tensor_core_prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& positions, const AttentionShape& shape, Tensor& out,
                           const ExecutionContext& ctx) {
  if (k_cache.dtype() == DataType::kBF16) {
    return launch_for_head_dim<__nv_bfloat16>(q, k_cache, v_cache, positions, shape, out, ctx);
  }
  return launch_for_head_dim<__half>(q, k_cache, v_cache, positions, shape, out, ctx);
}

}  // namespace kuiper::op::cuda
