// The decode GEMV's row readers that multiply in integers (__dp4a) with x quantized to int8
// (decode_gemv_int8_input.cuh), as llama.cpp's mmvq does. One reader, Int8InputChunks, with
// three policies: how a block of 32 weights of a row is stored (Int4Units, Int8Units), where
// the quantized x comes from (StagedInput, QuantizedTokens) and how many tokens' x each weight
// load is multiplied with (kTokens). With the block's inputs x̂_i = s · p_i (p_i int8), a block
// of 32 weights q_i adds, per row and token,
//   weight scale · s · (Σ q_i · p_i − zero · Σ p_i) + min · s · Σ p_i
// (int4: zero 8 and no min for symmetric weights, zero 0 with mins; int8: zero 0, no min), in
// one int32 sum of 8 __dp4a and two FMAs.
//  - int4, one token (Int4Int8Chunks): widening each nibble to fp32 and multiplying it by an
//    fp32 input cost ~100 instructions per 16-byte chunk and row, and 128 bytes of x loads: the
//    kernel ran at half the memory bandwidth.
//  - int8, one token, tall matrices (Int8Int8Chunks): widening each byte to fp32 (Int8Chunks)
//    costs about three instructions a weight; in integers a block of 32 weights is two byte
//    permutes and one dp4a per 4 weights (decode_gemv.cu, kInt8ShortRowsUpTo, has the figures,
//    and why short matrices are still widened).
//  - int8 and int4, several tokens (TokenChunks, multi_token_gemv.cu): each weight load serves
//    kTokens tokens. In fp32 a weight costs two instructions to widen and one FMA per token,
//    and 4 bytes of x per token; in integers a quarter of a dp4a per token and 1.25 bytes of x
//    (int8 weights: two byte permutes per 8 weights, shared by the tokens). At 8 tokens that is
//    ~3 instructions per int8 weight against ~10 in fp32, where an H100 issues ~10 per byte it
//    streams.
#pragma once

#include <cstdint>

#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_int8_input.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_rows.cuh"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

// How a block of 32 weights of a row is stored: Unit (its bytes and group constants, loaded
// past L1), load(a, first weight), split(unit, lo, hi) into the int8 words that pair with the
// input's even and odd words, zero(a), and kMins: whether a per-group minimum may be added.
// Both need cols % 32 == 0 and a power-of-two group size ≥ 32, so a unit lies in one group.

// int4 (op/int4_weight.h): 16 bytes, weight 2j in the low nibble of byte j: the low nibbles of
// word k are weights 8k, 8k + 2, ... (the even inputs), the high nibbles the odd ones.
struct Int4Units {
  static constexpr bool kMins = true;
  struct Unit { uint4 w; __half scale, min; };
  static __device__ Unit load(const DecodeGemvArgs& a, int64_t first_weight) {
    const int64_t group = first_weight >> a.group_shift;
    return {__ldcs(static_cast<const uint4*>(a.w) + first_weight / kInt8InputBlock), __ldcs(a.scales + group),
            a.mins != nullptr ? __ldcs(a.mins + group) : __half{}};
  }
  static __device__ void split(const Unit& u, uint4& lo, uint4& hi) {
    lo = {u.w.x & 0x0F0F0F0Fu, u.w.y & 0x0F0F0F0Fu, u.w.z & 0x0F0F0F0Fu, u.w.w & 0x0F0F0F0Fu};
    hi = {(u.w.x >> 4) & 0x0F0F0F0Fu, (u.w.y >> 4) & 0x0F0F0F0Fu, (u.w.z >> 4) & 0x0F0F0F0Fu,
          (u.w.w >> 4) & 0x0F0F0F0Fu};
  }
  static __device__ int zero(const DecodeGemvArgs& a) { return a.mins != nullptr ? 0 : kInt4SymmetricZero; }
};

// int8 (op/int8_weight.h): 32 bytes in two 16-byte loads, weight i in byte i. Words 2k and
// 2k + 1 hold weights 8k .. 8k + 7; one byte permute gathers the even ones, one the odd ones.
struct Int8Units {
  static constexpr bool kMins = false;
  struct Unit { uint4 w0, w1; __half scale; };
  static __device__ Unit load(const DecodeGemvArgs& a, int64_t first_weight) {
    const auto* p = reinterpret_cast<const uint4*>(static_cast<const int8_t*>(a.w) + first_weight);
    return {__ldcs(p), __ldcs(p + 1), __ldcs(a.scales + (first_weight >> a.group_shift))};
  }
  static __device__ void split(const Unit& u, uint4& lo, uint4& hi) {
    constexpr uint32_t kEven = 0x6420, kOdd = 0x7531;  // bytes 0, 2 of a then of b; 1, 3 of each
    lo = {__byte_perm(u.w0.x, u.w0.y, kEven), __byte_perm(u.w0.z, u.w0.w, kEven),
          __byte_perm(u.w1.x, u.w1.y, kEven), __byte_perm(u.w1.z, u.w1.w, kEven)};
    hi = {__byte_perm(u.w0.x, u.w0.y, kOdd), __byte_perm(u.w0.z, u.w0.w, kOdd),
          __byte_perm(u.w1.x, u.w1.y, kOdd), __byte_perm(u.w1.z, u.w1.w, kOdd)};
  }
  static __device__ int zero(const DecodeGemvArgs&) { return 0; }
};

// Rows of Weights in blocks of 32 (one unit per lane step), kRowsPerWarp rows per warp, each
// unit multiplied with the quantized x of kTokensPerWarp tokens from Input. A multi-token warp
// takes tokens first_token, first_token + 1, ...; those past a.tokens re-read the last one (the
// kernel does not store them).
template <typename Weights, typename Input, int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2,
          int kTokensPerWarp = 1>
struct Int8InputChunks {
  static constexpr int kRows = kRowsPerWarp, kBurst = kBurstLoads, kMinBlocks = kMinBlocksPerSm;
  static constexpr int kColumnParts = 1, kTokens = kTokensPerWarp;
  struct Loaded { typename Weights::Unit unit[kRows][kBurst]; };
  struct Sums { float sum[kTokens][kRows] = {}; };
  int row[kRows];  // 32-bit, no row pointers: the tall int4 reader (80 registers) spilled them
  int first_token;  // the tokens' indices are computed where used: an array of them spilled

  static size_t staged_input_bytes(const DecodeGemvArgs& a) requires requires { Input::bytes(a); } {
    return Input::bytes(a);
  }
  static __device__ void stage_input(const DecodeGemvArgs& a) requires requires { Input::stage(a); } {
    Input::stage(a);
  }

  __device__ Int8InputChunks(const DecodeGemvArgs&, const int (&rows)[kRows], int first = 0) : first_token(first) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) row[r] = rows[r];
  }
  __device__ int units(const DecodeGemvArgs& a) const { return a.cols / kInt8InputBlock; }
  __device__ void load(Loaded& l, int first, int units, const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        l.unit[r][u] = Weights::load(a, int64_t{row[r]} * a.cols + c * kInt8InputBlock);
      }
    });
  }
  __device__ void accumulate(Sums& s, const Loaded& l, int first, int units,
                             const DecodeGemvArgs& a) const {
    const int zero = Weights::zero(a);
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
      uint4 lo[kRows], hi[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) Weights::split(l.unit[r][u], lo[r], hi[r]);
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        constexpr int kParts = Input::kParts;
        const Int8InputUnit<kParts> x = Input::load(a, min(first_token + t, a.tokens - 1), c);
        float x_sum = 0.f;  // Σ x̂, for the min
#pragma unroll
        for (int p = 0; p < kParts; ++p) x_sum += x.part[p].scale * static_cast<float>(x.part[p].q_sum);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const auto& w = l.unit[r][u];
          // Σ w · x̂ over the block, before the weight's scale: each part's integer sum times its scale.
          const auto part_dot = [&](int p) {
            return static_cast<float>(dot_int8(lo[r], hi[r], x, p, -zero * x.part[p].q_sum));
          };
          float product = x.part[0].scale * part_dot(0);
#pragma unroll
          for (int p = 1; p < kParts; ++p) product = fmaf(x.part[p].scale, part_dot(p), product);
          if constexpr (Weights::kMins) {
            s.sum[t][r] += __half2float(w.scale) * product + __half2float(w.min) * x_sum;
          } else {
            s.sum[t][r] += __half2float(w.scale) * product;
          }
        }
      }
    });
  }
  __device__ void finish(const Sums& s, float (&out)[kTokens][kRows]) const {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) out[t][r] = warp_sum(s.sum[t][r]);
    }
  }
};

// The one-token int4 reader: x quantized by every block into its shared memory. cols ≤
// kInt8InputMaxCols.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2>
using Int4Int8Chunks = Int8InputChunks<Int4Units, StagedInput, kRowsPerWarp, kBurstLoads, kMinBlocksPerSm>;

// The one-token int8 reader for tall matrices, likewise. A unit is two 16-byte loads a row
// (int4: one).
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2>
using Int8Int8Chunks = Int8InputChunks<Int8Units, StagedInput, kRowsPerWarp, kBurstLoads, kMinBlocksPerSm>;

// The one-token int4 reader for x handed on quantized in halves by the kernel that wrote it.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2>
using Int4HalvesChunks = Int8InputChunks<Int4Units, QuantizedHalves, kRowsPerWarp, kBurstLoads, kMinBlocksPerSm>;

// The one-token int8 reader for tall matrices, likewise.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2>
using Int8HalvesChunks = Int8InputChunks<Int8Units, QuantizedHalves, kRowsPerWarp, kBurstLoads, kMinBlocksPerSm>;

// The multi-token readers: x of kTokensPerWarp tokens quantized once (quantize_tokens_kernel).
template <typename Weights, int kRowsPerWarp, int kBurstLoads, int kTokensPerWarp, int kMinBlocksPerSm = 2>
using TokenChunks = Int8InputChunks<Weights, QuantizedTokens, kRowsPerWarp, kBurstLoads, kMinBlocksPerSm, kTokensPerWarp>;

}  // namespace
}  // namespace kuiper::op::cuda
