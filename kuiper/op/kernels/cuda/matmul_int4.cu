// int4-weight matmul on the GPU: the GEMV of decode_gemv.cu (Int4Int8Chunks, with its input
// quantized to int8), the multi-token GEMV of multi_token_gemv.cu, or the bf16 GEMM on W
// dequantized (dequantized_gemm.cuh chooses).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "kuiper/op/kernels/cuda/elementwise_loop.cuh"
#include "kuiper/op/kernels/cuda/int4_cuda_kernels.cuh"

namespace kuiper::op::cuda {
namespace {

// kWidth weights per thread step: 32 (one 16-byte load, one scale, four 16-byte stores) where
// the values and the output are 16-byte aligned and the group size is a multiple of 32 (a step
// then stays in one group), else 1 — the int8 kernel's layout (matmul_int8.cu has its timings).
template <int kWidth>
__global__ void dequantize_int4_bf16_kernel(const uint8_t* __restrict__ packed, const __half* __restrict__ scales,
                                            const __half* __restrict__ mins, __nv_bfloat16* __restrict__ out,
                                            int64_t n, int group_size) {
  const bool with_min = mins != nullptr;
  for_each_group<kWidth>(n, [&]<int W>(int64_t i) {
    const int64_t g = i / group_size;
    const float scale = __half2float(scales[g]), min = with_min ? __half2float(mins[g]) : 0.f;
    if constexpr (W == 32) {
      const uint4 bytes = *reinterpret_cast<const uint4*>(packed + i / 2);
      const auto* b = reinterpret_cast<const uint8_t*>(&bytes);
      alignas(16) __nv_bfloat162 pairs[16];
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        pairs[k] = __floats2bfloat162_rn(int4_value(b[k] & 0x0F, scale, min, with_min),
                                         int4_value(b[k] >> 4, scale, min, with_min));
      }
      auto* dst = reinterpret_cast<uint4*>(out + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) dst[k] = reinterpret_cast<const uint4*>(pairs)[k];
    } else {
      out[i] = __float2bfloat16(int4_value(int4_nibble(packed, i), scale, min, with_min));
    }
  });
}

}  // namespace

Status matmul_int4(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_int4_weight(weight));
  return quantized_matmul(in, weight, out, ctx, DataType::kINT4, [&](__nv_bfloat16* scratch, cudaStream_t stream) {
    const int64_t n = weight.numel();
    const auto* packed = weight.values.data<uint8_t>();
    const __half* mins = weight.mins.is_empty() ? nullptr : weight.mins.data<__half>();
    const bool wide = weight.group_size % 32 == 0 && aligned_to(packed, 16) && aligned_to(scratch, 16);
    with_width<32>(wide, [&](auto width) {
      dequantize_int4_bf16_kernel<width()><<<elementwise_blocks((n + width() - 1) / width()), kElementwiseThreads, 0, stream>>>(
          packed, weight.scales.data<__half>(), mins, scratch, n, weight.group_size);
    });
  });
}

}  // namespace kuiper::op::cuda
