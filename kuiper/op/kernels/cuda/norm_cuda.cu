// RMS normalisation, plain and with the residual add fused in: one block per row, the sum of
// squares reduced with CUB.
#include <cub/block/block_reduce.cuh>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kThreads = 512;

// With `delta`, first x += delta (written back to `in`). Each thread touches the same elements
// in both passes, so `out` may alias `in` or `delta`.
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(float* in, const float* delta, const float* weight,
                                                           int64_t dim, float eps, float* out) {
  let_next_kernel_start();  // the GEMV after it may start streaming weights (launch.cuh)
  float* x = in + blockIdx.x * dim;
  float* y = out + blockIdx.x * dim;
  float sum_sq = 0.f;
  if (delta != nullptr) {
    const float* d = delta + blockIdx.x * dim;
    for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
      const float v = x[i] + d[i];
      x[i] = v;
      sum_sq += v * v;
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += kThreads) sum_sq += x[i] * x[i];
  }
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ float scale;
  const float total = Reduce(storage).Sum(sum_sq);
  if (threadIdx.x == 0) scale = rsqrtf(total / static_cast<float>(dim) + eps);
  __syncthreads();  // every thread reads x before any writes y: out may alias in
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) y[i] = x[i] * scale * weight[i];
}

Status launch_rmsnorm(const Tensor& in, const float* delta, const Tensor& weight, float eps, Tensor& out,
                      Stream stream) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(in, DataType::kFP32, "rmsnorm input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(weight, DataType::kFP32, "rmsnorm weight"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "rmsnorm output"));
  const int64_t dim = weight.numel();
  if (dim == 0 || in.numel() % dim != 0 || out.numel() != in.numel()) {
    return invalid_argument("rmsnorm shapes do not fit: input " + in.describe() + ", weight " +
                            weight.describe() + ", output " + out.describe());
  }
  const int64_t rows = in.numel() / dim;
  if (rows == 0) return ok_status();
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, as_cuda_stream(stream)>>>(
      in.data<float>(), delta, weight.data<float>(), dim, eps, out.data<float>());
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("rmsnorm");
  return ok_status();
}

}  // namespace

Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, Stream stream) {
  return launch_rmsnorm(in, nullptr, weight, eps, out, stream);
}

Status add_rmsnorm(Tensor& x, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                   Stream stream) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(delta, DataType::kFP32, "rmsnorm residual"));
  if (delta.numel() != x.numel()) {
    return invalid_argument("residual " + delta.describe() + " does not fit " + x.describe());
  }
  return launch_rmsnorm(x, delta.data<float>(), weight, eps, out, stream);
}

}  // namespace kuiper::op::cuda
