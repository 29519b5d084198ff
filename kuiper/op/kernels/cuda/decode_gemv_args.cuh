// The decode-time GEMV, y = W · x for one token, with the norm before it and an epilogue after
// it fused in (kernel_table.h, DecodeGemv). Decode is bound by reading W once from HBM, so every
// part of it is built around that stream: 16-byte loads coalesced across a warp, weights read
// past L1 (__ldcs) so that x stays cached there, fp32 sums reduced with warp shuffles, and the
// fused work kept off the weight stream (a block that holds its registers after its weights
// arrived leaves HBM idle). The parts, one header each:
//  - decode_gemv_args.cuh (this): what the kernels read, and the arithmetic they share;
//  - decode_gemv_rows.cuh: row readers, one per storage layout, and the contract they meet;
//  - decode_gemv_int8_input.cuh, decode_gemv_int8_input_rows.cuh: the readers that multiply in
//    integers with x quantized to int8 (int4 weights; int8 and int4 weights for several tokens);
//  - decode_gemv_epilogues.cuh: the input norm's 1/rms and what is done with the rows' sums;
//  - decode_gemv_warp_kernel.cuh: the kernel of any shape, a warp walking its rows in bursts;
//  - decode_gemv_one_pass_kernel.cuh: the kernel for rows one block reads in one pass;
//  - decode_gemv.cu: which kernel and row reader a call gets (choose_gemv_kernel), and launch;
//  - multi_token_gemv.cu: the same warp kernel for a few tokens at once (batched decode).
// docs/performance.md has the measurements behind each choice.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cstdint>

#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"
#include "kuiper/op/kernels/cuda/rope_kv.cuh"

namespace kuiper::op::cuda {

// The input norm a kernel is built for (kernel_table.h, DecodeGemv).
enum class InputNorm {
  kNone,
  kGivenSums,  // x · g came in, with the sums of squares of x over runs (in_sumsq)
  kSummedHere, // x came in with g (in_norm_weight): the one-pass kernel, whose block reads all
               // of x, sums the squares itself
};

// What the kernel reads, in device terms (decode_gemv.cu fills it from a DecodeGemv).
struct DecodeGemvArgs {
  const void* w = nullptr;
  const __half* scales = nullptr;  // int8/int4 only (op/weight_groups.h: fp16 on CUDA)
  const __half* mins = nullptr;    // int4 with a per-group minimum only
  int group_size = 0;              // int8/int4 only
  int group_shift = 0;             // log2(group_size), Int8Chunks/Int4Int8Chunks only
  const float* x = nullptr;
  const float* in_sumsq = nullptr;  // InputNorm::kGivenSums: Σ x² in runs
  int sumsq_runs = 0;
  const float* in_norm_weight = nullptr;  // InputNorm::kSummedHere: g
  float eps = 0.f;
  int rows = 0, cols = 0;
  float* out = nullptr;
  // kAccumulate with a next norm
  const float* next_norm_weight = nullptr;
  float* next_normed = nullptr;
  float* next_sumsq = nullptr;
  RopeKvArgs rope;  // kRopeKv
  // The multi-token GEMV (multi_token_gemv.cu): x is [tokens, cols], out [tokens, rows], and
  // x_int8 holds x quantized by quantize_tokens_kernel (decode_gemv_int8_input.cuh).
  int tokens = 1;
  const void* x_int8 = nullptr;  // also: x handed on quantized in halves (QuantizedHalves)
  // kAccumulate with a next norm, kSwiglu: where the output goes quantized in halves as well
  // (DecodeGemv::out_quantized).
  void* out_int8 = nullptr;
};

// DecodeGemvArgs::group_shift for groups of g: log2(g) when g is a power of two ≥ 16, else -1.
// A 16-byte chunk (16 int8 or 32 int4 weights) then never straddles a group when g is at least
// the chunk's weights, as Int8Chunks and Int4Int8Chunks need.
inline int chunk_group_shift(int g) {
  const auto u = static_cast<unsigned>(g);
  return g >= 16 && std::has_single_bit(u) ? std::countr_zero(u) : -1;
}

// A quantized weight's group constants and size into `a`.
inline void set_weight_groups(DecodeGemvArgs& a, const Weight& w) {
  a.scales = static_cast<const __half*>(w.scales.raw_data());
  a.mins = w.mins.is_empty() ? nullptr : static_cast<const __half*>(w.mins.raw_data());
  a.group_size = w.group_size;
  a.group_shift = chunk_group_shift(w.group_size);
}

// Elements of T in one 16-byte chunk, the unit the dense kernels read rows in.
template <typename T>
inline constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));

// The longest row the one-pass kernel reads: one chunk per thread, 1024 threads.
inline constexpr int kOnePassMaxChunks = 1024;

// Internal linkage: without relocatable device code every translation unit that includes these
// headers gets its own copy of each kernel, and shared host-side launch stubs would mix one
// unit's kernel registration with another's.
namespace {

inline constexpr int kDecodeWarps = 8;  // warps per block of the warp kernel

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Four input elements starting at i (16-byte aligned). x is written by the previous kernel
// (hence load_after_wait, never __ldg: launch.cuh).
__device__ __forceinline__ float4 input4(const float* x, int i) {
  return load_after_wait(reinterpret_cast<const float4*>(x + i));
}

__device__ __forceinline__ float squares(const float4& v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }
__device__ __forceinline__ float4 times(const float4& a, const float4& b) {
  return {a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w};
}

// 1 / rms of the norm's input, from the sum of its sums of squares.
__device__ __forceinline__ float inverse_rms(const DecodeGemvArgs& a, float sumsq) {
  return rsqrtf(sumsq / static_cast<float>(a.cols) + a.eps);
}

// Dot product of 16 bytes of weights with the matching inputs x0 (and x1 for 16-bit weights).
template <typename Half>
__device__ __forceinline__ float dot16(const uint4& w, const float4& x0, const float4& x1,
                                       const Half* tag) {
  const float2 a = widen_pair(w.x, tag), b = widen_pair(w.y, tag), c = widen_pair(w.z, tag),
               d = widen_pair(w.w, tag);
  return a.x * x0.x + a.y * x0.y + b.x * x0.z + b.y * x0.w +
         c.x * x1.x + c.y * x1.y + d.x * x1.z + d.y * x1.w;
}
__device__ __forceinline__ float dot16(const uint4& w, const float4& x0, const float4&,
                                       const float*) {
  return __uint_as_float(w.x) * x0.x + __uint_as_float(w.y) * x0.y +
         __uint_as_float(w.z) * x0.z + __uint_as_float(w.w) * x0.w;
}

}  // namespace
}  // namespace kuiper::op::cuda
