// The decode GEMV's row reader for int4 weights (op/int4_weight.h), multiplying in integers as
// llama.cpp's mmvq does. Widening each nibble to fp32 and multiplying it by an fp32 input cost
// ~100 instructions per 16-byte chunk and row, and 128 bytes of x loads: the kernel ran at half
// the memory bandwidth. Here every block first quantizes x to int8 in blocks of 32 (one fp32
// scale each: max|x| / 127, as the CPU int4 kernel does, so both meet the same error bound,
// cpu/int4_cpu_kernels.h) into shared memory, laid out so that a
// chunk's weight word lines up with one word of inputs for its low nibbles and one for its high
// nibbles. A chunk of 32 weights is then 8 __dp4a per row on the masked nibbles, and its group's
// arithmetic: with the block's inputs x̂_i = s · p_i (p_i int8), it adds
//   weight scale · s · (Σ q_i · p_i − zero · Σ p_i) + min · s · Σ p_i
// (zero 8 and no min for symmetric weights, zero 0 with mins), in one int32 sum and two FMAs.
#pragma once

#include <cstdint>

#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_rows.cuh"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

inline constexpr int kInt8InputBlock = 32;  // inputs per int8 scale: one chunk of int4 weights

// The longest rows whose quantized x fits the 48 KB of dynamic shared memory a block gets
// without opting in (40 bytes per block of 32, 40 KB here); longer ones take the scalar reader.
inline constexpr int kInt8InputMaxCols = 32768;

// A block of 32 inputs quantized: x̂_i = scale · q_i.
struct Int8InputBlock {
  float scale;
  int q_sum;  // Σ q_i
};

// x quantized in shared memory (dynamic, int8_input_bytes): for block b, even[b] holds in word
// k the q of inputs 8k, 8k + 2, 8k + 4, 8k + 6 (byte order), the inputs of the low nibbles of
// weight word k of a chunk (weight 2j in the low nibble of byte j); odd[b] the q of 8k + 1, ...,
// those of the high nibbles. Even and odd parts are separate arrays, so the 16-byte loads of a
// warp's consecutive chunks are consecutive and free of bank conflicts.
struct Int8Input {
  uint4* even;
  uint4* odd;
  Int8InputBlock* blocks;
};

__host__ __device__ constexpr size_t int8_input_bytes(int cols) {
  return static_cast<size_t>(cols / kInt8InputBlock) * (2 * sizeof(uint4) + sizeof(Int8InputBlock));
}

__device__ __forceinline__ Int8Input int8_input(int cols) {
  extern __shared__ uint4 staged[];
  const int blocks = cols / kInt8InputBlock;
  return {staged, staged + blocks, reinterpret_cast<Int8InputBlock*>(staged + 2 * blocks)};
}

// The larger of a and b, or NaN where either is NaN (fmaxf would drop it): a NaN input makes its
// block's scale NaN, so that it reaches every output as it does in fp32, instead of being
// quantized to 0.
__device__ __forceinline__ float max_or_nan(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}

// Quantizes float4 m of x (inputs 4m .. 4m + 3) into `s`. The 8 float4s of a block of 32 are
// held by 8 consecutive lanes, which find the block's max|x| and Σ q together, so every lane of
// the warp calls this; those with m ≥ quads (x's float4s) carry zeros and store nothing.
__device__ __forceinline__ void quantize_quad(const float4& v, int m, int quads, const Int8Input& s) {
  float max_abs = max_or_nan(max_or_nan(fabsf(v.x), fabsf(v.y)), max_or_nan(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int offset = 4; offset > 0; offset /= 2) {
    max_abs = max_or_nan(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
  }
  // One division per float4, not four: x · (127 / max|x|) may differ from the CPU's
  // x / (max|x| / 127) in the last bit, which moves q across a rounding boundary only where x
  // lies within that bit of it, inside the same half-step bound.
  const float scale = max_abs / 127.f, inverse = max_abs > 0.f ? 127.f / max_abs : 0.f;
  const auto quantize = [&](float x) { return __float2int_rn(x * inverse); };
  const int q0 = quantize(v.x), q1 = quantize(v.y), q2 = quantize(v.z), q3 = quantize(v.w);
  int q_sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int offset = 4; offset > 0; offset /= 2) q_sum += __shfl_xor_sync(0xffffffffu, q_sum, offset);
  if (m >= quads) return;
  // Float4 m = 8b + p holds inputs 4p .. 4p + 3 of block b: bytes 2p and 2p + 1 of its even
  // part (inputs 4p, 4p + 2) and of its odd part (4p + 1, 4p + 3), the 16-bit word m of each.
  const auto pair = [](int lo, int hi) { return static_cast<uint16_t>((lo & 0xFF) | (hi & 0xFF) << 8); };
  reinterpret_cast<uint16_t*>(s.even)[m] = pair(q0, q2);
  reinterpret_cast<uint16_t*>(s.odd)[m] = pair(q1, q3);
  if (m % 8 == 0) s.blocks[m / 8] = {scale, q_sum};
}

// The whole block quantizes x (cols % 32 == 0) into shared memory. Each thread loads a batch of
// two float4s before quantizing either, so that a 4096-wide x costs two round trips to L2, not
// four; a batch of four made ptxas spill the tall reader's loaded scales (it has 80 registers).
__device__ __forceinline__ void quantize_input(const DecodeGemvArgs& a) {
  constexpr int kThreads = kDecodeWarps * 32, kBatch = 2;
  const Int8Input s = int8_input(a.cols);
  const int quads = a.cols / 4;
  for (int first = 0; first < quads; first += kThreads * kBatch) {  // all threads: it shuffles
    const int mine = first + static_cast<int>(threadIdx.x);
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int m = mine + k * kThreads;
      v[k] = m < quads ? input4(a.x, 4 * m) : float4{};
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) quantize_quad(v[k], mine + k * kThreads, quads, s);
  }
}

// Σ q · p over the 8 nibbles q of a weight word and their int8 inputs p, added to acc: the low
// nibbles (weights 2j) with x_even, the high nibbles (2j + 1) with x_odd.
__device__ __forceinline__ int dot8_int4_int8(uint32_t word, uint32_t x_even, uint32_t x_odd, int acc) {
  acc = __dp4a(static_cast<int>(word & 0x0F0F0F0Fu), static_cast<int>(x_even), acc);
  return __dp4a(static_cast<int>((word >> 4) & 0x0F0F0F0Fu), static_cast<int>(x_odd), acc);
}

// int4 rows in 16-byte chunks of 32 weights, kRowsPerWarp rows per warp, multiplied with x
// quantized to int8 (above). cols % 32 == 0, cols ≤ kInt8InputMaxCols and the group size is a
// power of two ≥ 32, so a chunk is one block of x and never straddles a group.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2>
struct Int4Int8Chunks {
  static constexpr int kRows = kRowsPerWarp, kBurst = kBurstLoads, kMinBlocks = kMinBlocksPerSm;
  static constexpr int kColumnParts = 1;
  struct Loaded { uint4 w[kRows][kBurst]; float scale[kRows][kBurst]; float min[kRows][kBurst]; };
  struct Sums { float sum[kRows] = {}; };
  int row[kRows];  // 32-bit, no row pointers: the tall reader (80 registers) spilled them

  // The staged input (decode_gemv_warp_kernel.cuh): x quantized by the whole block.
  static size_t staged_input_bytes(const DecodeGemvArgs& a) { return int8_input_bytes(a.cols); }
  static __device__ void stage_input(const DecodeGemvArgs& a) { quantize_input(a); }

  __device__ Int4Int8Chunks(const DecodeGemvArgs& a, const int (&rows)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) row[r] = rows[r];
  }
  __device__ int units(const DecodeGemvArgs& a) const { return a.cols / kInt8InputBlock; }
  __device__ void load(Loaded& l, int first, int units, const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t first_weight = int64_t{row[r]} * a.cols + c * kInt8InputBlock;
        const int64_t group = first_weight >> a.group_shift;
        l.w[r][u] = __ldcs(static_cast<const uint4*>(a.w) + first_weight / kInt8InputBlock);
        l.scale[r][u] = __ldcs(a.scales + group);
        l.min[r][u] = a.mins != nullptr ? __ldcs(a.mins + group) : 0.f;
      }
    });
  }
  __device__ void accumulate(Sums& s, const Loaded& l, int first, int units,
                             const DecodeGemvArgs& a) const {
    const Int8Input x = int8_input(a.cols);
    const int zero = a.mins != nullptr ? 0 : kInt4SymmetricZero;
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
      const uint4 even = x.even[c], odd = x.odd[c];
      const Int8InputBlock block = x.blocks[c];
      const int offset = -zero * block.q_sum;
      const float x_sum = block.scale * static_cast<float>(block.q_sum);  // Σ x̂, for the min
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4& w = l.w[r][u];
        int dot = dot8_int4_int8(w.x, even.x, odd.x, offset);
        dot = dot8_int4_int8(w.y, even.y, odd.y, dot);
        dot = dot8_int4_int8(w.z, even.z, odd.z, dot);
        dot = dot8_int4_int8(w.w, even.w, odd.w, dot);
        s.sum[r] += l.scale[r][u] * block.scale * static_cast<float>(dot) + l.min[r][u] * x_sum;
      }
    });
  }
  __device__ void finish(const Sums& s, float (&out)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) out[r] = warp_sum(s.sum[r]);
  }
};

}  // namespace
}  // namespace kuiper::op::cuda
