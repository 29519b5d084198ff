// x quantized to int8 in halves of 16 values (kernel_table.h, decode_quantized_x_bytes): the
// form in which a kernel that writes an int8 or int4 GEMV's input (a decode GEMV's epilogue,
// decode attention's output) hands it on, so that the GEMV reads int8 x instead of quantizing it in
// every block (decode_gemv_int8_input.cuh, QuantizedHalves).
#pragma once

#include <cstdint>

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

inline constexpr int kInt8InputBlock = kDecodeQuantizedBlock;  // inputs per int8 scale: one chunk of int4 weights

// A block of 32 inputs (or a half of one) quantized: x̂_i = scale · q_i.
struct Int8InputBlock {
  float scale;
  int q_sum;  // Σ q_i
};

// For block b of 32 inputs, even[b] holds in word k the q of inputs 8k, 8k + 2, 8k + 4, 8k + 6
// (byte order) and odd[b] those of 8k + 1, ..., 8k + 7, as the int4 reader pairs them with the
// low and high nibbles of weight word k; then its two halves, inputs 0-15 (even and odd words
// x, y) and 16-31 (z, w), each with its scale and Σ q.
struct Int8Halves {
  uint4* even;
  uint4* odd;
  Int8InputBlock* halves;
};

__device__ __forceinline__ Int8Halves int8_halves_at(void* base, int n) {
  auto* words = static_cast<uint4*>(base);
  const int blocks = n / kInt8InputBlock;
  return {words, words + blocks, reinterpret_cast<Int8InputBlock*>(words + 2 * blocks)};
}

// The larger of a and b, or NaN where either is NaN (fmaxf would drop it): a NaN input makes its
// block's scale NaN, so that it reaches every output as it does in fp32, instead of being
// quantized to 0.
__device__ __forceinline__ float max_or_nan(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}

// Quantizes x_index (value v of x, n long) into half index / 16 of q: q = round(v · 127 /
// max|x|), scale max|x| / 127. Every lane of the warp calls it; lanes 16h .. 16h + 15 hold the
// 16 values of one half, in order, and find its max|x| and Σ q together. Only those with
// `store` write.
__device__ __forceinline__ void quantize_half(float v, int index, bool store, const Int8Halves& q) {
  float max_abs = fabsf(v);
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) {
    max_abs = max_or_nan(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
  }
  const float scale = max_abs / 127.f, inverse = max_abs > 0.f ? 127.f / max_abs : 0.f;
  const int value = __float2int_rn(v * inverse);
  int q_sum = value;
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) q_sum += __shfl_xor_sync(0xffffffffu, q_sum, offset);
  if (!store) return;
  // Input i of block b: byte (i % 8) / 2 of word i / 8 of even[b] (i even) or odd[b] (i odd).
  const int block = index / kInt8InputBlock, i = index % kInt8InputBlock;
  auto* bytes = reinterpret_cast<int8_t*>((i % 2 == 0 ? q.even : q.odd) + block);
  bytes[i / 8 * 4 + i % 8 / 2] = static_cast<int8_t>(value);
  if (index % 16 == 0) q.halves[index / 16] = {scale, q_sum};
}

}  // namespace
}  // namespace kuiper::op::cuda
