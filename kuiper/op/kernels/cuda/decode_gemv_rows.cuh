// How the decode GEMV reads rows: one row reader per storage layout, each meeting the contract
// below, used by the warp kernel (decode_gemv_warp_kernel.cuh); decode_gemv.cu picks one per
// dtype, shape and alignment (choose_gemv_kernel).
//
// A row reader `Rows` is constructed per warp, from the arguments and the kRows row indices the
// warp takes (warp_rows below: clamped into the matrix, so always readable), and, where it
// reads several tokens, the first of the warp's tokens; it provides:
//  - kRows: rows per warp; the warp's lanes share every load of x among them.
//  - kTokens: tokens per warp, 1 but for the multi-token readers (TokenChunks): every weight
//    load is multiplied with the x of kTokens tokens; a.tokens tokens take as many launches'
//    worth of blocks (decode_gemv_warp_kernel.cuh).
//  - kBurst: units per lane per burst; the kernel keeps two bursts in flight per warp.
//  - kMinBlocks: blocks per multiprocessor that ptxas must leave registers for (__launch_bounds__);
//    left to itself it gave some shapes 150-200 registers and one block, with nothing to stream
//    while that block multiplied.
//  - kColumnParts: warps of a block that share each row's columns (1 but for SplitColumns).
//  - Loaded: one burst of a lane's weights (and scales), in registers; Sums: a lane's running
//    sums, zero when value-initialised.
//  - units(a): units per row (16-byte chunks, or elements); lane l reads units l, l + 32, ...
//  - load(loaded, first, end, a): issues the loads of units first + 32u (u < kBurst) that lie
//    before end (the warp's part of the row ends there). It reads only the weights and scales,
//    never x: the first two bursts are issued before the wait for the kernel that writes x.
//  - accumulate(sums, loaded, first, end, a): multiplies that burst by x, adds into sums.
//  - finish(sums, y): y[t][r], the dot products of the warp's rows r with token t's x over its
//    lanes' units, reduced across the warp (the same in every lane).
//  - optionally, staged_input_bytes(a) and stage_input(a): a form of x that the whole block
//    prepares in dynamic shared memory once x is written, before any accumulate
//    (decode_gemv_warp_kernel.cuh, StagesInput).
// The epilogues (decode_gemv_epilogues.cuh) then receive y, the row indices and which of them
// lie inside the matrix.
//
// The readers:
//  - DenseChunks<T, burst, rows>: fp32/fp16/bf16 in 16-byte chunks.
//  - Int8Chunks<rows, burst, blocks>: int8 with fp32 group scales. A 16-byte load holds 16
//    weights, which need 64 bytes of x; with one row per warp the x traffic through L1 (4x the
//    weights) is the limit, so a warp serves several rows and reads each x chunk once for all
//    of them. Bytes are widened without the int-to-float unit (widen_biased_byte). Short
//    matrices only; tall ones take Int8Int8Chunks.
//  - Int8Int8Chunks<rows, burst, blocks> (decode_gemv_int8_input_rows.cuh): int8 rows of tall
//    matrices, 32 weights per unit, multiplied in integers (__dp4a) with x quantized to int8 in
//    shared memory.
//  - Int4Int8Chunks<rows, burst, blocks> (decode_gemv_int8_input_rows.cuh): int4
//    (op/int4_weight.h) with fp32 group scales and optional mins, 32 weights per 16-byte load,
//    laid out and chosen as Int8Chunks, multiplied in integers (__dp4a) with x quantized to int8
//    in shared memory.
//  - TokenChunks<weights, rows, burst, tokens> (decode_gemv_int8_input_rows.cuh): int8 or int4
//    rows multiplied in integers with the x of several tokens, quantized once to int8.
//  - SplitColumns<Rows, parts>: Rows with each row's columns shared by `parts` warps of a
//    block, for int8/int4 matrices of few rows (too few warps otherwise to fill the
//    multiprocessors).
//  - ScalarRows<T, rows>: any shape, alignment or group size, one element per lane step; slow,
//    and no 7B-class model needs it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

// Calls f(u, c) for each of a lane's kBurst units c = first + 32u that lie before `units`.
template <int kBurst, typename F>
__device__ __forceinline__ void for_each_unit(int first, int units, F&& f) {
#pragma unroll
  for (int u = 0; u < kBurst; ++u) {
    if (first + u * 32 < units) f(u, first + u * 32);
  }
}

// fp32/fp16/bf16 rows read in 16-byte chunks, kRowsPerWarp rows per warp sharing each x load;
// rows start 16-byte aligned and hold whole chunks.
template <typename T, int kBurstLoads = 4, int kRowsPerWarp = 1>
struct DenseChunks {
  static constexpr int kRows = kRowsPerWarp, kBurst = kBurstLoads, kMinBlocks = 2;
  static constexpr int kColumnParts = 1, kTokens = 1;
  static constexpr int kElems = kChunkElems<T>;
  struct Loaded { uint4 w[kRows][kBurst]; };
  struct Sums { float partial[kRows][kBurst] = {}; };  // one per load: independent FMA chains
  const uint4* row[kRows];

  __device__ DenseChunks(const DecodeGemvArgs& a, const int (&rows)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row[r] = static_cast<const uint4*>(a.w) + static_cast<int64_t>(rows[r]) * (a.cols / kElems);
    }
  }
  __device__ int units(const DecodeGemvArgs& a) const { return a.cols / kElems; }
  __device__ void load(Loaded& l, int first, int units, const DecodeGemvArgs&) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) l.w[r][u] = __ldcs(row[r] + c);  // read once: evict first
    });
  }
  __device__ void accumulate(Sums& s, const Loaded& l, int first, int units,
                             const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
      const float4 x0 = input4(a.x, c * kElems);
      const float4 x1 = kElems == 8 ? input4(a.x, c * kElems + 4) : x0;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        s.partial[r][u] += dot16(l.w[r][u], x0, x1, static_cast<const T*>(nullptr));
      }
    });
  }
  __device__ void finish(const Sums& s, float (&out)[kTokens][kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < kBurst; ++u) sum += s.partial[r][u];
      out[0][r] = warp_sum(sum);
    }
  }
};

// The signed byte kIndex of a word whose bytes were offset by 128, as an exact float.
template <int kIndex>
__device__ __forceinline__ float widen_biased_byte(uint32_t biased_word) {
  constexpr float kOffset = 8388608.f + 128.f;  // 2^23 + 128
  return __uint_as_float(__byte_perm(biased_word, 0x4B000000u, 0x7540u + kIndex)) - kOffset;
}

__device__ __forceinline__ float dot4_int8(uint32_t word, const float4& x) {
  const uint32_t biased = word ^ 0x80808080u;  // b -> b + 128 in every byte
  return widen_biased_byte<0>(biased) * x.x + widen_biased_byte<1>(biased) * x.y +
         widen_biased_byte<2>(biased) * x.z + widen_biased_byte<3>(biased) * x.w;
}

// int8 rows in 16-byte chunks, kRowsPerWarp rows per warp. cols % 16 == 0 and the group size
// is a power of two ≥ 16, so a chunk never straddles a group and the group index is a shift.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm = 2>
struct Int8Chunks {
  static constexpr int kRows = kRowsPerWarp, kBurst = kBurstLoads, kMinBlocks = kMinBlocksPerSm;
  static constexpr int kColumnParts = 1, kTokens = 1;
  struct Loaded { uint4 w[kRows][kBurst]; __half scale[kRows][kBurst]; };
  struct Sums { float sum[kRows] = {}; };
  const uint4* row[kRows];
  int64_t flat[kRows];  // index of the row's first weight, for the scale lookup

  __device__ Int8Chunks(const DecodeGemvArgs& a, const int (&rows)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      flat[r] = static_cast<int64_t>(rows[r]) * a.cols;
      row[r] = reinterpret_cast<const uint4*>(static_cast<const int8_t*>(a.w) + flat[r]);
    }
  }
  __device__ int units(const DecodeGemvArgs& a) const { return a.cols / 16; }
  __device__ void load(Loaded& l, int first, int units, const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        l.w[r][u] = __ldcs(row[r] + c);
        l.scale[r][u] = __ldcs(a.scales + ((flat[r] + c * 16) >> a.group_shift));
      }
    });
  }
  __device__ void accumulate(Sums& s, const Loaded& l, int first, int units,
                             const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
      const float4 x0 = input4(a.x, c * 16), x1 = input4(a.x, c * 16 + 4);
      const float4 x2 = input4(a.x, c * 16 + 8), x3 = input4(a.x, c * 16 + 12);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4& v = l.w[r][u];
        s.sum[r] += __half2float(l.scale[r][u]) * (dot4_int8(v.x, x0) + dot4_int8(v.y, x1) +
                                                   dot4_int8(v.z, x2) + dot4_int8(v.w, x3));
      }
    });
  }
  __device__ void finish(const Sums& s, float (&out)[kTokens][kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) out[0][r] = warp_sum(s.sum[r]);
  }
};

// The element type ScalarRows reads int4 weights as (two a byte, op/int4_weight.h).
struct PackedInt4 {};

// Any row length, alignment or group size: one element per lane step, kBurst steps per burst.
// T is float, __half, __nv_bfloat16, int8_t (with scales) or PackedInt4 (with scales and
// optional mins).
template <typename T, int kRowsPerWarp = 1>
struct ScalarRows {
  static constexpr int kRows = kRowsPerWarp, kBurst = 8, kMinBlocks = 2;
  static constexpr int kColumnParts = 1, kTokens = 1;
  struct Loaded { float w[kRows][kBurst]; };
  struct Sums { float sum[kRows] = {}; };
  int64_t flat[kRows];  // index of the row's first weight

  __device__ ScalarRows(const DecodeGemvArgs& a, const int (&rows)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) flat[r] = static_cast<int64_t>(rows[r]) * a.cols;
  }
  __device__ int units(const DecodeGemvArgs& a) const { return a.cols; }
  __device__ void load(Loaded& l, int first, int units, const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t i = flat[r] + c;
        if constexpr (std::is_same_v<T, PackedInt4>) {
          const int64_t g = i / a.group_size;
          l.w[r][u] = int4_value(int4_nibble(static_cast<const uint8_t*>(a.w), i), __half2float(a.scales[g]),
                                 a.mins != nullptr ? __half2float(a.mins[g]) : 0.f, a.mins != nullptr);
        } else if constexpr (std::is_same_v<T, int8_t>) {
          l.w[r][u] = static_cast<float>(static_cast<const T*>(a.w)[i]) * __half2float(a.scales[i / a.group_size]);
        } else {
          l.w[r][u] = to_float(static_cast<const T*>(a.w)[i]);
        }
      }
    });
  }
  __device__ void accumulate(Sums& s, const Loaded& l, int first, int units,
                             const DecodeGemvArgs& a) const {
    for_each_unit<kBurst>(first, units, [&](int u, int c) {
      const float x = load_after_wait(a.x + c);
#pragma unroll
      for (int r = 0; r < kRows; ++r) s.sum[r] += l.w[r][u] * x;
    });
  }
  __device__ void finish(const Sums& s, float (&out)[kTokens][kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) out[0][r] = warp_sum(s.sum[r]);
  }
};

// Rows read as `Rows` does, with each row's columns split into kParts pieces read by kParts
// warps of the block (their sums meet in shared memory): a block holds kParts times fewer rows.
template <typename Rows, int kParts>
struct SplitColumns : Rows {
  static constexpr int kColumnParts = kParts;
  using Rows::Rows;
};

// The rows of warp `warp` of the block that takes row block `block`: consecutive rows, so that
// kRopeKv finds each rotated pair in one warp. kSwiglu's gate row i meets up row rows/2 + i in
// the same block: the warp kernel's first half of warps read gate rows and the second half the
// matching up rows; the one-pass kernel's block (one warp's worth of rows) holds gates in its
// first half of rows and ups in the second. A row past the end is clamped (re-read) and marked
// invalid.
template <GemvEpilogue kEpi, int kRows, int kRowWarps>
__device__ __forceinline__ void warp_rows(const DecodeGemvArgs& a, int block, int warp, int (&rows)[kRows],
                                          bool (&valid)[kRows]) {
  const int global_warp = block * kRowWarps + warp;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    int row;
    if constexpr (kEpi == GemvEpilogue::kSwiglu && kRowWarps == 1) {  // the one-pass kernel: a pair in a block
      const int hidden = a.rows / 2;
      const int out = global_warp * (kRows / 2) + r % (kRows / 2);
      valid[r] = out < hidden;
      row = r < kRows / 2 ? out : hidden + out;
    } else if constexpr (kEpi == GemvEpilogue::kSwiglu) {  // gate warps, then up warps
      constexpr int kHalfWarps = kRowWarps / 2;
      const int hidden = a.rows / 2;
      const int out = (block * kHalfWarps + warp % kHalfWarps) * kRows + r;
      valid[r] = out < hidden;
      row = warp < kHalfWarps ? out : hidden + out;
    } else {
      row = global_warp * kRows + r;
      valid[r] = row < a.rows;
    }
    rows[r] = min(row, a.rows - 1);
  }
}

}  // namespace
}  // namespace kuiper::op::cuda
