// int8-weight matmul on the GPU.
// Decode (T = 1) streams W once: one warp per row, each lane issuing kUnroll 16-byte loads
// (16 weights each) before using any, read past L1 (__ldcs) so that x stays cached. Weights are
// widened in registers without the slow int->float conversion unit: a byte b, offset to
// b + 128, is placed in the mantissa of 2^23 (one byte permute) and 2^23 + 128 subtracted.
// One scale multiply per 16 weights: the fast path needs 16-weight chunks that never straddle a
// group (cols % 16 == 0, group a power of two ≥ 16, so the group index is a shift); any other
// shape takes a plain per-element kernel.
// Prefill (T > 1) is compute-bound: W is dequantized to bf16 into scratch memory and multiplied
// by the bf16 tensor-core GEMM behind matmul().
#include <cuda_bf16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/device_scratch.cuh"
#include "kuiper/op/kernels/cuda/int8_cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kWarps = 8;   // rows per block
constexpr int kUnroll = 8;  // 16-byte loads in flight per lane: 4 KiB per warp

// The signed byte `index` of `word`, as an exact float.
template <int kIndex>
__device__ __forceinline__ float widen_byte(uint32_t biased_word) {
  constexpr float kOffset = 8388608.f + 128.f;  // 2^23 + 128
  return __uint_as_float(__byte_perm(biased_word, 0x4B000000u, 0x7540u + kIndex)) - kOffset;
}

__device__ __forceinline__ float dot4(uint32_t word, float4 x) {
  const uint32_t biased = word ^ 0x80808080u;  // b -> b + 128 in every byte
  return widen_byte<0>(biased) * x.x + widen_byte<1>(biased) * x.y + widen_byte<2>(biased) * x.z +
         widen_byte<3>(biased) * x.w;
}

// 16 weights · 16 inputs (x: four float4).
__device__ __forceinline__ float dot16(const uint4& w, const float4* x) {
  return dot4(w.x, __ldg(x)) + dot4(w.y, __ldg(x + 1)) + dot4(w.z, __ldg(x + 2)) +
         dot4(w.w, __ldg(x + 3));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kWarps * 32)
    gemv_int8_kernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                     const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                     int group_shift) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int chunks = cols / 16;
  const int64_t flat = static_cast<int64_t>(row) * cols;
  const uint4* wr = reinterpret_cast<const uint4*>(q + flat);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float sum = 0.f;
  for (int base = lane; base < chunks; base += 32 * kUnroll) {
    uint4 w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * 32 < chunks) w[u] = __ldcs(wr + base + u * 32);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * 32;
      if (c < chunks) sum += __ldg(scales + ((flat + c * 16) >> group_shift)) * dot16(w[u], x4 + c * 4);
    }
  }
  sum = warp_sum(sum);
  if (lane == 0) y[row] = sum;
}

// Any shape and group size: one warp per row, one element per lane step.
__global__ void __launch_bounds__(kWarps * 32)
    gemv_int8_scalar_kernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                            const float* __restrict__ x, float* __restrict__ y, int rows,
                            int cols, int group_size) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t flat = static_cast<int64_t>(row) * cols;
  float sum = 0.f;
  for (int c = lane; c < cols; c += 32) {
    sum += static_cast<float>(q[flat + c]) * scales[(flat + c) / group_size] * x[c];
  }
  sum = warp_sum(sum);
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
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  const int shift = chunk_group_shift(weight.group_size);
  if (cols % 16 == 0 && shift >= 0 && aligned16(q) && aligned16(in.raw_data())) {
    gemv_int8_kernel<<<blocks, kWarps * 32, 0, stream>>>(q, s, in.data<float>(), out.data<float>(),
                                                          rows, cols, shift);
  } else {
    gemv_int8_scalar_kernel<<<blocks, kWarps * 32, 0, stream>>>(
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
