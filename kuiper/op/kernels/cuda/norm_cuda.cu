// RMS normalisation, plain and with the residual add fused in: one block per row, the sum of
// squares reduced with CUB.
#include <cub/block/block_reduce.cuh>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/elementwise_loop.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kThreads = 512;

// With `delta`, first x += delta (written back to `in`). Each thread touches the same elements
// in both passes, so `out` may alias `in` or `delta`. kWidth elements per access (4 where every
// row starts 16-byte aligned, which measured faster for the prefill's norms;
// docs/performance.md); out is stored as Out (fp32, or rounded for a 16-bit GEMM input).
template <int kWidth, typename Out>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(float* in, const float* delta, const float* weight,
                                                           int64_t dim, float eps, Out* out) {
  let_next_kernel_start();  // the GEMV after it may start streaming weights (launch.cuh)
  using F = Floats<kWidth>;
  float* x = in + blockIdx.x * dim;
  Out* y = out + blockIdx.x * dim;
  float sum_sq = 0.f;
  for (int64_t i = threadIdx.x * kWidth; i < dim; i += kThreads * kWidth) {
    F v = F::load(x + i);
    if (delta != nullptr) {
      const F d = F::load(delta + blockIdx.x * dim + i);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) v.v[k] += d.v[k];
      v.store(x + i);
    }
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum_sq += v.v[k] * v.v[k];
  }
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ float scale;
  const float total = Reduce(storage).Sum(sum_sq);
  if (threadIdx.x == 0) scale = rsqrtf(total / static_cast<float>(dim) + eps);
  __syncthreads();  // every thread reads x before any writes y: out may alias in
  for (int64_t i = threadIdx.x * kWidth; i < dim; i += kThreads * kWidth) {
    F v = F::load(x + i);
    const F g = F::load(weight + i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) v.v[k] = v.v[k] * scale * g.v[k];
    v.store_as(y + i);
  }
}

Status launch_rmsnorm(const Tensor& in, const float* delta, const Tensor& weight, float eps, Tensor& out,
                      const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(in, DataType::kFP32, "rmsnorm input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(weight, DataType::kFP32, "rmsnorm weight"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(out, "rmsnorm output"));
  const int64_t dim = weight.numel();
  if (dim == 0 || in.numel() % dim != 0 || out.numel() != in.numel()) {
    return invalid_argument("rmsnorm shapes do not fit: input " + in.describe() + ", weight " +
                            weight.describe() + ", output " + out.describe());
  }
  const int64_t rows = in.numel() / dim;
  if (rows == 0) return ok_status();
  // Every row starts 16-byte aligned when the first does and dim is a multiple of 4.
  const bool quads = dim % 4 == 0 && quads_aligned({in.raw_data(), delta != nullptr ? delta : in.raw_data(),
                                                    weight.raw_data(), out.raw_data()});
  const auto blocks = static_cast<unsigned>(rows);
  const cudaStream_t s = as_cuda_stream(ctx.stream());
  KUIPER_RETURN_IF_ERROR(dispatch_float_type(out.dtype(), [&](auto zero) {
    using Out = decltype(zero);
    with_width<4>(quads, [&](auto width) {
      rmsnorm_kernel<width()><<<blocks, kThreads, 0, s>>>(in.data<float>(), delta, weight.data<float>(),
                                                          dim, eps, static_cast<Out*>(out.raw_data()));
    });
    return ok_status();
  }));
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("rmsnorm");
  return ok_status();
}

}  // namespace

Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, const ExecutionContext& ctx) {
  return launch_rmsnorm(in, nullptr, weight, eps, out, ctx);
}

Status add_rmsnorm(Tensor& x, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                   const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(delta, DataType::kFP32, "rmsnorm residual"));
  if (delta.numel() != x.numel()) {
    return invalid_argument("residual " + delta.describe() + " does not fit " + x.describe());
  }
  return launch_rmsnorm(x, delta.data<float>(), weight, eps, out, ctx);
}

}  // namespace kuiper::op::cuda
