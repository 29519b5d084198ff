// int8-weight matmul on the GPU: the GEMV of decode_gemv.cu, the multi-token GEMV of
// multi_token_gemv.cu, or the bf16 GEMM on W dequantized (dequantized_gemm.cuh chooses).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "kuiper/op/kernels/cuda/elementwise_loop.cuh"
#include "kuiper/op/kernels/cuda/int8_cuda_kernels.cuh"

namespace kuiper::op::cuda {
namespace {

// kWidth weights per thread step: 16 (one 16-byte load, one scale, two 16-byte stores) where
// the values and the output are 16-byte aligned and the group size is a multiple of 16 (a step
// then stays in one group), else 1. One weight per step, with a 64-bit division each, took
// most of an int8 prefill's time (docs/performance.md, "Measurements behind other choices").
template <int kWidth>
__global__ void dequantize_bf16_kernel(const int8_t* __restrict__ q, const __half* __restrict__ scales,
                                       __nv_bfloat16* __restrict__ out, int64_t n, int group_size) {
  for_each_group<kWidth>(n, [&]<int W>(int64_t i) {
    const float scale = __half2float(scales[i / group_size]);
    if constexpr (W == 16) {
      const uint4 bytes = *reinterpret_cast<const uint4*>(q + i);
      const auto* b = reinterpret_cast<const int8_t*>(&bytes);
      alignas(16) __nv_bfloat162 pairs[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        pairs[k] = __floats2bfloat162_rn(static_cast<float>(b[2 * k]) * scale,
                                         static_cast<float>(b[2 * k + 1]) * scale);
      }
      auto* dst = reinterpret_cast<uint4*>(out + i);
      dst[0] = reinterpret_cast<const uint4*>(pairs)[0];
      dst[1] = reinterpret_cast<const uint4*>(pairs)[1];
    } else {
      out[i] = __float2bfloat16(static_cast<float>(q[i]) * scale);
    }
  });
}

}  // namespace

Status matmul_int8(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(weight));
  return quantized_matmul(in, weight, out, ctx, DataType::kINT8, [&](__nv_bfloat16* scratch, cudaStream_t stream) {
    const int64_t n = weight.numel();
    const int8_t* q = weight.values.data<int8_t>();
    const bool wide = weight.group_size % 16 == 0 && aligned_to(q, 16) && aligned_to(scratch, 16);
    with_width<16>(wide, [&](auto width) {
      dequantize_bf16_kernel<width()><<<elementwise_blocks((n + width() - 1) / width()), kElementwiseThreads, 0, stream>>>(
          q, weight.scales.data<__half>(), scratch, n, weight.group_size);
    });
  });
}

}  // namespace kuiper::op::cuda
