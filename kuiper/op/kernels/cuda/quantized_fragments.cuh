// Quantized weights converted to bf16 in registers, exactly as the dequantize kernels round them
// (matmul_int8.cu, matmul_int4.cu), for the tensor-core GEMM of quantized_mma.cu: a few
// operations a weight and no int-to-float conversions, which run at a quarter of the float rate.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cuda/tensor_core_ops.cuh"

namespace kuiper::op::cuda {

// Four int8 weights (one word, lowest byte first) times `scale`, rounded to bf16: columns 0 and 1
// into `low`, 2 and 3 into `high`. A byte biased to q + 128 and put in the low mantissa bits of
// 2^23 reads 2^23 + q + 128 as a float, exactly, in one byte permutation; q · scale is exact in
// fp32.
__device__ __forceinline__ void dequantize_int8(uint32_t word, float scale, uint32_t& low, uint32_t& high) {
  const uint32_t biased = word ^ 0x80808080u;
  float v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[k] = (__uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | k)) - 8388736.f) * scale;
  }
  low = pack_pair(v[0], v[1], __nv_bfloat16{});
  high = pack_pair(v[2], v[3], __nv_bfloat16{});
}

// Four int4 weights with a minimum (the low 16 bits of `bits`, lowest nibble first) as
// int4_value gives them, rounded to bf16: columns 0 and 1 into `low`, 2 and 3 into `high`. Nibble
// k stays where it is, in the mantissa of 2^23: the float reads 2^23 + q·16^k exactly, and
// scaled[k] is the group's scale times 16^-k (exact: a power of two), so that
// fma(that - 2^23, scaled[k], min) = fma(q, scale, min) with int4_value's one rounding: three
// operations a weight, no shifts.
__device__ __forceinline__ void dequantize_int4_with_min(uint32_t bits, const float (&scaled)[4], float min,
                                                         uint32_t& low, uint32_t& high) {
  float v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float f = __uint_as_float((bits & (0xFu << (4 * k))) | 0x4B000000u);
    v[k] = fmaf(f - 8388608.f, scaled[k], min);
  }
  low = pack_pair(v[0], v[1], __nv_bfloat16{});
  high = pack_pair(v[2], v[3], __nv_bfloat16{});
}

// A group's fp16 scale as two bf16 parts, hi + lo = scale exactly: hi is the scale rounded to
// bf16, lo the remainder (at most its last three significant bits), each in both halves.
struct SplitScale {
  __nv_bfloat162 hi, lo;
};

__device__ __forceinline__ SplitScale split_scale(float scale) {
  const __nv_bfloat16 hi = __float2bfloat16_rn(scale);
  return {__bfloat162bfloat162(hi), __bfloat162bfloat162(__float2bfloat16_rn(scale - __bfloat162float(hi)))};
}

// Eight symmetric int4 weights (one word, lowest nibble first) times the group's scale, rounded
// to bf16 exactly as int4_value and the dequantize kernel round them, as bf16 pairs of columns
// (0, 4), (1, 5), (2, 6), (3, 7): the order of the interleaved x (interleaved_input_kernel). Two
// nibbles masked into the mantissas of a pair of bf16 128s read 128 + q exactly, and less 136,
// q - 8; (q - 8)·lo is exact in bf16 (at most 7 bits), and the fused (q - 8)·hi + (q - 8)·lo
// rounds the exact product once. Packed: about five operations per two weights, no conversion.
__device__ __forceinline__ void dequantize_int4_symmetric(uint32_t word, const SplitScale& scale, uint32_t (&pairs)[4]) {
  const __nv_bfloat162 offset = __float2bfloat162_rn(static_cast<float>(128 + kInt4SymmetricZero));
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t biased = ((word >> (4 * k)) & 0x000F000Fu) | 0x43004300u;
    const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased), offset);
    const __nv_bfloat162 v = __hfma2(q, scale.hi, __hmul2(q, scale.lo));
    pairs[k] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

}  // namespace kuiper::op::cuda
