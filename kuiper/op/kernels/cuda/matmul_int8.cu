// int8-weight matmul on the GPU.
// Decode (T = 1) streams W once through the GEMV of gemv_int8.cuh; shapes it cannot take (cols
// not a multiple of 16, a group size that is not a power of two ≥ 16, unaligned data) run a
// plain per-element kernel.
// Prefill (T > 1) is compute-bound: W is dequantized to bf16 into scratch memory and multiplied
// by the bf16 tensor-core GEMM behind matmul().
#include <cuda_bf16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/device_scratch.cuh"
#include "kuiper/op/kernels/cuda/gemv_int8.cuh"
#include "kuiper/op/kernels/cuda/int8_cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

// Rows per warp and 16-byte loads per row and lane in one burst: the best of those measured
// (gemv_int8.cuh has the numbers; tools/cuda_kernels_bench.cu re-measures them).
constexpr int kGemvRows = 4;
constexpr int kGemvBurst = 4;

// Any shape and group size: one warp per row, one element per lane step.
__global__ void __launch_bounds__(kGemvInt8Warps * 32)
    gemv_int8_scalar_kernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                            const float* __restrict__ x, float* __restrict__ y, int rows,
                            int cols, int group_size) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kGemvInt8Warps + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t flat = static_cast<int64_t>(row) * cols;
  float sum = 0.f;
  for (int c = lane; c < cols; c += 32) {
    sum += static_cast<float>(q[flat + c]) * scales[(flat + c) / group_size] * x[c];
  }
  sum = warp_sum_int8(sum);
  if (lane == 0) y[row] = sum;
}

__global__ void dequantize_bf16_kernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                                       __nv_bfloat16* __restrict__ out, int64_t n, int group_size) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16(static_cast<float>(q[i]) * scales[i / group_size]);
  }
}

// log2(g) when g is a power of two ≥ 16 (a 16-weight chunk then never straddles a group), else -1.
int chunk_group_shift(int g) {
  if (g < 16 || (g & (g - 1)) != 0) return -1;
  int shift = 0;
  while ((1 << shift) < g) ++shift;
  return shift;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status gemv_int8(const Tensor& in, const Weight& weight, Tensor& out, cudaStream_t stream) {
  const int rows = static_cast<int>(weight.rows()), cols = static_cast<int>(weight.cols());
  const int8_t* q = weight.values.data<int8_t>();
  const float* s = weight.scales.data<float>();
  const int shift = chunk_group_shift(weight.group_size);
  if (cols % 16 == 0 && shift >= 0 && aligned16(q) && aligned16(in.raw_data())) {
    constexpr int rows_per_block = kGemvInt8Warps * kGemvRows;
    const unsigned blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    KUIPER_CUDA_RETURN_IF_ERROR(launch_overlapped(
        gemv_int8_kernel<kGemvRows, kGemvBurst>, dim3(blocks), dim3(kGemvInt8Warps * 32), 0, stream,
        q, s, in.data<float>(), out.data<float>(), rows, cols, shift));
  } else {
    const unsigned blocks = static_cast<unsigned>((rows + kGemvInt8Warps - 1) / kGemvInt8Warps);
    gemv_int8_scalar_kernel<<<blocks, kGemvInt8Warps * 32, 0, stream>>>(
        q, s, in.data<float>(), out.data<float>(), rows, cols, weight.group_size);
  }
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("gemv_int8");
  return ok_status();
}

Status gemm_int8(const Tensor& in, const Weight& weight, Tensor& out, cudaStream_t stream) {
  static DeviceScratch dequantized;
  const int64_t n = weight.values.numel();
  const size_t bytes = static_cast<size_t>(n) * sizeof(__nv_bfloat16);
  KUIPER_ASSIGN_OR_RETURN(void* scratch, dequantized.get(bytes));
  dequantize_bf16_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      weight.values.data<int8_t>(), weight.scales.data<float>(),
      static_cast<__nv_bfloat16*>(scratch), n, weight.group_size);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("dequantize int8 to bf16");
  // The scratch is borrowed: it outlives the call, and the GEMM is queued on the same stream.
  const auto buffer = Buffer::borrow(scratch, bytes, DeviceType::kCUDA, nullptr);
  KUIPER_ASSIGN_OR_RETURN(Tensor values, Tensor::view(buffer, 0, DataType::kBF16, weight.values.shape()));
  return matmul(in, Weight{std::move(values), Tensor(), 0}, out, stream);
}

}  // namespace

Status matmul_int8(const Tensor& in, const Weight& weight, Tensor& out, Stream stream) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(weight));
  KUIPER_RETURN_IF_ERROR(expect_cuda(weight.values, DataType::kINT8, "matmul weight"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(in, DataType::kFP32, "matmul input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "matmul output"));
  const int64_t rows = weight.rows(), cols = weight.cols();
  if (cols == 0 || in.numel() % cols != 0 || out.numel() != in.numel() / cols * rows) {
    return invalid_argument("matmul shapes do not fit: input " + in.describe() + ", weight " +
                            weight.values.describe() + ", output " + out.describe());
  }
  if (rows > INT32_MAX || cols > INT32_MAX) {
    return unsupported("matmul dimensions beyond 2^31: weight " + weight.values.describe());
  }
  const int64_t tokens = in.numel() / cols;
  if (tokens == 0 || rows == 0) return ok_status();
  return tokens == 1 ? gemv_int8(in, weight, out, as_cuda_stream(stream))
                     : gemm_int8(in, weight, out, as_cuda_stream(stream));
}

}  // namespace kuiper::op::cuda
