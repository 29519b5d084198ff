// The decode GEMV's input quantized to int8, for the readers that multiply in integers
// (decode_gemv_int8_input_rows.cuh), as llama.cpp's mmvq does: x in blocks of 32 inputs, each
// with one fp32 scale max|x| / 127 (as the CPU int4 kernel does, so both meet the same error
// bound, cpu/int4_cpu_kernels.h) and the sum of its int8 values. Two places hold it:
//  - StagedInput (one token): every block quantizes x into its shared memory after the wait for
//    the kernel that writes x. x is 16 KB for 4096 columns, small beside a block's weights.
//  - QuantizedHalves (one token, x handed on quantized): the kernel that wrote x also wrote it
//    quantized in halves of 16 (int8_halves.cuh): a GEMV from the outputs each of its blocks
//    holds (quantize_outputs), decode attention from each head's;
//    a block then reads 48 bytes per 32 inputs from L2 instead of quantizing all of x first
//    (kernel_table.h, decode_quantized_x_bytes; docs/performance.md has the gain).
//  - QuantizedTokens (several tokens): quantize_tokens_kernel quantizes all T rows of x once
//    into global scratch, and every block reads them there (through L1). Quantizing T rows in
//    every block would read T · cols · 4 bytes per block: at T = 8 and 4096 columns, 128 KB per
//    block of 16 rows (64 KB of int8 weights), more than the weights themselves; quantized once,
//    a block reads 1.25 bytes per input and token, T · 5 KB.
#pragma once

#include <cstdint>

#include <cub/block/block_reduce.cuh>

#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/int8_halves.cuh"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

// The longest rows whose quantized x fits the 48 KB of dynamic shared memory a block gets
// without opting in (40 bytes per block of 32, 40 KB here); longer ones take the scalar reader.
inline constexpr int kInt8InputMaxCols = 32768;

// x quantized (int8_input_bytes per token): for block b, even[b] holds in word k the q of inputs
// 8k, 8k + 2, 8k + 4, 8k + 6 (byte order), odd[b] those of 8k + 1, ..., 8k + 7. The int4 reader
// finds there the inputs of the low and high nibbles of weight word k of a chunk (weight 2j in
// the low nibble of byte j); the int8 reader permutes its bytes to match (Int8Units). Even and
// odd parts are separate arrays, so the 16-byte loads of a warp's consecutive chunks are
// consecutive and free of bank conflicts.
struct Int8Input {
  uint4* even;
  uint4* odd;
  Int8InputBlock* blocks;
};

__host__ __device__ constexpr size_t int8_input_bytes(int cols) {
  return static_cast<size_t>(cols / kInt8InputBlock) * (2 * sizeof(uint4) + sizeof(Int8InputBlock));
}

// The distance between two tokens' quantized rows in global scratch, in 16-byte words: each
// row starts 16-byte aligned.
__host__ __device__ constexpr int64_t quantized_token_words(int cols) {
  return static_cast<int64_t>((int8_input_bytes(cols) + sizeof(uint4) - 1) / sizeof(uint4));
}

// Bytes of global scratch that `tokens` rows of `cols` inputs take quantized.
__host__ __device__ constexpr size_t quantized_tokens_bytes(int tokens, int cols) {
  return static_cast<size_t>(tokens) * quantized_token_words(cols) * sizeof(uint4);
}

// The quantized row whose first 16-byte word is `base`.
__device__ __forceinline__ Int8Input int8_input_at(uint4* base, int cols) {
  const int blocks = cols / kInt8InputBlock;
  return {base, base + blocks, reinterpret_cast<Int8InputBlock*>(base + 2 * blocks)};
}

// The block's quantized x in dynamic shared memory (StagedInput).
__device__ __forceinline__ Int8Input int8_input(int cols) {
  extern __shared__ uint4 staged[];
  return int8_input_at(staged, cols);
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

// Warp 0 of a block writes the kCount values it produced (outputs first .. first + kCount - 1 of
// n, in shared memory) quantized into a.out_int8, after the block's barrier. first and kCount
// are multiples of 16, so a block always holds whole halves.
template <int kCount>
__device__ __forceinline__ void quantize_outputs(const DecodeGemvArgs& a, const float* values, int first, int n) {
  static_assert(kCount % 16 == 0, "a block quantizes whole halves of 16 outputs");
  const Int8Halves q = int8_halves_at(a.out_int8, n);
  const int lane = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int base = 0; base < kCount; base += 32) {
    const int t = base + lane;
    quantize_half(t < kCount ? values[t] : 0.f, first + t, t < kCount && first + t < n, q);
  }
}

// Divides the scales of the block's quantized x by the rms of x, from each thread's share of
// the sum of squares of x; the whole block calls it, after quantizing.
__device__ __forceinline__ void divide_scales_by_rms(const DecodeGemvArgs& a, float sumsq, const Int8Input& s) {
  using BlockSum = cub::BlockReduce<float, kDecodeWarps * 32>;
  __shared__ typename BlockSum::TempStorage reduce;
  __shared__ float inv_rms;
  const float total = BlockSum(reduce).Sum(sumsq);
  if (threadIdx.x == 0) inv_rms = inverse_rms(a, total);
  __syncthreads();  // also: every scale is written
  for (int b = static_cast<int>(threadIdx.x); b < a.cols / kInt8InputBlock; b += kDecodeWarps * 32) {
    s.blocks[b].scale *= inv_rms;
  }
}

// The whole block quantizes x (cols % 32 == 0) into shared memory. Each thread loads a batch of
// two float4s before quantizing either, so that a 4096-wide x costs two round trips to L2, not
// four; a batch of four made ptxas spill the tall reader's loaded scales (it has 80 registers).
// x that came with its norm's weight g (InputNorm::kSummedHere: after the ranks' sum of a split
// model, decode_gemv.cu) is normalized on the way, without a pass of its own: a block of
// x · g quantizes to the same int8 values as the block of x · g / rms, so x · g is quantized
// while the squares of x are summed, and the block's scales are divided by rms at the end.
__device__ __forceinline__ void quantize_input(const DecodeGemvArgs& a) {
  constexpr int kThreads = kDecodeWarps * 32, kBatch = 2;
  const Int8Input s = int8_input(a.cols);
  const int quads = a.cols / 4;
  const bool norm = a.in_norm_weight != nullptr;
  float sumsq = 0.f;
  for (int first = 0; first < quads; first += kThreads * kBatch) {  // all threads: it shuffles
    const int mine = first + static_cast<int>(threadIdx.x);
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int m = mine + k * kThreads;
      v[k] = m < quads ? input4(a.x, 4 * m) : float4{};
    }
    if (norm) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int m = mine + k * kThreads;
        sumsq += squares(v[k]);
        // g is a weight, unchanged since the model was made: read through the read-only cache.
        if (m < quads) v[k] = times(v[k], __ldg(reinterpret_cast<const float4*>(a.in_norm_weight) + m));
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) quantize_quad(v[k], mine + k * kThreads, quads, s);
  }
  if (norm) divide_scales_by_rms(a, sumsq, s);
}

inline constexpr int kQuantizeThreads = 256;

// x [tokens, cols] quantized into x_int8, one row per blockIdx.y, a float4 per thread. A block's
// threads come in whole blocks of 32 inputs (8 float4s), as quantize_quad needs.
__global__ void __launch_bounds__(kQuantizeThreads)
    quantize_tokens_kernel(const float* x, uint4* x_int8, int cols) {
  let_next_kernel_start();
  wait_for_previous_kernel();  // x is written by the previous kernel; x_int8 may still be read
  const int token = static_cast<int>(blockIdx.y), quads = cols / 4;
  const int m = static_cast<int>(blockIdx.x) * kQuantizeThreads + static_cast<int>(threadIdx.x);
  const float* row = x + static_cast<int64_t>(token) * cols;
  const float4 v = m < quads ? input4(row, 4 * m) : float4{};
  quantize_quad(v, m, quads, int8_input_at(x_int8 + token * quantized_token_words(cols), cols));
}

// One block of 32 inputs of one token, as the readers multiply it: its int8 values and the
// scale and Σ q of each of its kParts parts (1: the whole block; 2: its halves of 16).
template <int kParts>
struct Int8InputUnit {
  uint4 even, odd;
  Int8InputBlock part[kParts];
};

// Where the int8 readers find x (decode_gemv_int8_input_rows.cuh): each provides
// load(a, token, c), block c of the token's quantized row; a staged one also the bytes and
// the quantizing of the block's shared memory (decode_gemv_warp_kernel.cuh, StagesInput).
struct StagedInput {
  static constexpr int kParts = 1;
  static size_t bytes(const DecodeGemvArgs& a) { return int8_input_bytes(a.cols); }
  static __device__ void stage(const DecodeGemvArgs& a) { quantize_input(a); }
  static __device__ Int8InputUnit<1> load(const DecodeGemvArgs& a, int, int c) {
    const Int8Input x = int8_input(a.cols);
    return {x.even[c], x.odd[c], {x.blocks[c]}};
  }
};
struct QuantizedTokens {
  static constexpr int kParts = 1;
  static __device__ Int8InputUnit<1> load(const DecodeGemvArgs& a, int token, int c) {
    const int blocks = a.cols / kInt8InputBlock;
    const uint4* row = static_cast<const uint4*>(a.x_int8) + token * quantized_token_words(a.cols);
    const float2 block = load_after_wait(reinterpret_cast<const float2*>(row + 2 * blocks) + c);
    return {load_after_wait(row + c), load_after_wait(row + blocks + c), {{block.x, __float_as_int(block.y)}}};
  }
};
struct QuantizedHalves {
  static constexpr int kParts = 2;
  static __device__ Int8InputUnit<2> load(const DecodeGemvArgs& a, int, int c) {
    const Int8Halves x = int8_halves_at(const_cast<void*>(a.x_int8), a.cols);
    const float4 halves = load_after_wait(reinterpret_cast<const float4*>(x.halves) + c);
    return {load_after_wait(x.even + c), load_after_wait(x.odd + c),
            {{halves.x, __float_as_int(halves.y)}, {halves.z, __float_as_int(halves.w)}}};
  }
};

// Σ q · p over part `part` of kParts of a block of 32 weights q and their int8 inputs p (the
// whole block, or half of it), added to acc: lo holds the weights that pair with the even inputs,
// hi those that pair with the odd ones; word k of each covers inputs 8k .. 8k + 7.
template <int kParts>
__device__ __forceinline__ int dot_int8(const uint4& lo, const uint4& hi, const Int8InputUnit<kParts>& x, int part,
                                        int acc) {
  const auto word = [](const uint4& v, int k) { return static_cast<int>(k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w); };
  constexpr int kWords = 4 / kParts;
#pragma unroll
  for (int k = part * kWords; k < (part + 1) * kWords; ++k) {
    acc = __dp4a(word(lo, k), word(x.even, k), acc);
    acc = __dp4a(word(hi, k), word(x.odd, k), acc);
  }
  return acc;
}

}  // namespace
}  // namespace kuiper::op::cuda
