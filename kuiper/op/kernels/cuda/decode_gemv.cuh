// The decode-time GEMV, y = W · x for one token, with the norm before it and an epilogue after
// it fused in (kernel_table.h, DecodeGemv). Decode is bound by reading W once from HBM, so the
// kernel is built around that: 16-byte loads coalesced across the warp, weights read past L1
// (__ldcs) so that x stays cached there, fp32 sums reduced with warp shuffles, and every warp
// keeping two short bursts of loads in flight: it multiplies one while the next arrives, and
// asks for the one after as soon as a buffer is free. Warps that issued one long burst, waited
// and multiplied (the design before) all waited and then all multiplied at once, leaving HBM
// idle in between; on an H200, % of copy bandwidth, bf16 4096x4096 / 4096x11008 / 11008x4096:
// 2 rows x 8 loads 67 / 75 / 82%, 1 row x 4 loads twice in flight 75 / 94 / 91%.
//
// How rows are read is a policy (one type per storage layout), the rest is shared:
//  - DenseChunks<T, burst, rows>: fp32/fp16/bf16. 1 row x 2 loads for plain and accumulating
//    GEMVs up to 8192 rows, 1 x 4 above; swiglu and rope pair rows inside a warp, 2 rows x 2
//    loads (norm-fed swiglu on the shapes above: 73-86%; 2 x 4: 66-77%). Deeper bursts,
//    registers capped so that 3 or 4 blocks fit a multiprocessor, or a warp reading its pair
//    of rows one after the other (70-80% on the gate/up shapes), measured slower.
//  - SplitColumns<Rows, parts>: Rows with each row's columns shared by `parts` warps of a block,
//    for int8 matrices of few rows (4096x4096: 50% -> 62%).
//  - Int8Chunks<rows, burst, blocks>: int8 weights with fp32 group scales. A 16-byte load
//    holds 16 weights, which need 64 bytes of x; with one row per warp the x traffic through
//    L1 (4x the weights) was the limit, so a warp serves several rows and reads each x chunk
//    once for all of them. Bytes are widened without the int-to-float unit: b + 128 is placed
//    in the mantissa of 2^23 (one byte permute) and 2^23 + 128 subtracted. int8 costs about
//    three instructions a weight, and int8 GEMVs reach 62-85% of copy bandwidth against 80-100%
//    for bf16: an int8 x fp16 tensor-core version (one instruction a weight, x split into fp16
//    hi + lo) measured no faster, so it was dropped.
//  - ScalarRows<T, rows>: any shape or alignment, one element per lane step; slow, and no
//    7B-class model needs it.
// decode_gemv.cu picks per shape (and has the numbers). Rows of up to 8192 bf16 columns are read
// by the one-pass kernel of decode_gemv_one_pass.cuh instead, except in the residual accumulate;
// the epilogues below (inverse_rms, write_rows, load_rope_pairs / write_rope_pairs) serve both.
//
// What the fusions cost had to be kept off the weight stream: a block that holds its registers
// after its weights arrived leaves HBM idle. Measured designs that lost: each block reducing x
// for its own norm, or multiplying x by the norm weight in the dot product (L1 traffic doubled:
// 32000x4096 fell from 100% to 71%); pairing swiglu/rope rows across warps through shared
// memory. What is used: the norm's sums of squares come with x from the GEMV that wrote it,
// and pairs of rows live in one warp.
//
// Launched overlapped (launch.cuh), a block issues its first two bursts of weights before
// waiting for the kernel that writes x; the weight stream of one GEMV starts while the
// attention or GEMV before it is still finishing. Every warp of a block runs the same loop
// (rows past the end re-read the last row and drop the result) because the residual epilogue
// synchronises the block. Every policy asks ptxas for room for at least two blocks per
// multiprocessor (kMinBlocks): left to itself it gave some shapes 150-200 registers and one
// block, with nothing to stream while that block multiplied.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cstdint>
#include <type_traits>

#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"
#include "kuiper/op/kernels/cuda/rope_kv.cuh"

namespace kuiper::op::cuda {

// What the kernel reads, in device terms (decode_gemv.cu fills it from a DecodeGemv).
struct DecodeGemvArgs {
  const void* w = nullptr;
  const float* scales = nullptr;  // int8 only
  int group_size = 0;             // int8 only
  int group_shift = 0;            // log2(group_size), Int8Chunks only
  const float* x = nullptr;
  const float* in_sumsq = nullptr;  // the input's norm: x · g came in, Σ x² in runs
  int sumsq_runs = 0;
  float eps = 0.f;
  int rows = 0, cols = 0;
  float* out = nullptr;
  // kAccumulate with a next norm
  const float* next_norm_weight = nullptr;
  float* next_normed = nullptr;
  float* next_sumsq = nullptr;
  RopeKvArgs rope;  // kRopeKv
};

// DecodeGemvArgs::group_shift for int8 groups of g: log2(g) when g is a power of two ≥ 16 (a
// 16-weight chunk then never straddles a group, as Int8Chunks needs), else -1.
inline int chunk_group_shift(int g) {
  const auto u = static_cast<unsigned>(g);
  return g >= 16 && std::has_single_bit(u) ? std::countr_zero(u) : -1;
}

// Elements of T in one 16-byte chunk, the unit the dense kernels read rows in.
template <typename T>
inline constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));

// Internal linkage: without relocatable device code every translation unit that includes this
// gets its own copy of each kernel, and shared host-side launch stubs would mix one unit's
// kernel registration with another's.
namespace {

inline constexpr int kDecodeWarps = 8;

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
  static constexpr int kColumnParts = 1;
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
  __device__ void finish(const Sums& s, float (&out)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < kBurst; ++u) sum += s.partial[r][u];
      out[r] = warp_sum(sum);
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
  static constexpr int kColumnParts = 1;
  struct Loaded { uint4 w[kRows][kBurst]; float scale[kRows][kBurst]; };
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
        s.sum[r] += l.scale[r][u] * (dot4_int8(v.x, x0) + dot4_int8(v.y, x1) +
                                     dot4_int8(v.z, x2) + dot4_int8(v.w, x3));
      }
    });
  }
  __device__ void finish(const Sums& s, float (&out)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) out[r] = warp_sum(s.sum[r]);
  }
};

// Any row length, alignment or group size: one element per lane step, kBurst steps per burst.
// T is float, __half, __nv_bfloat16 or int8_t (with scales).
template <typename T, int kRowsPerWarp = 1>
struct ScalarRows {
  static constexpr int kRows = kRowsPerWarp, kBurst = 8, kMinBlocks = 2;
  static constexpr int kColumnParts = 1;
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
        const T w = static_cast<const T*>(a.w)[flat[r] + c];
        if constexpr (std::is_same_v<T, int8_t>) {
          l.w[r][u] = static_cast<float>(w) * a.scales[(flat[r] + c) / a.group_size];
        } else {
          l.w[r][u] = to_float(w);
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
  __device__ void finish(const Sums& s, float (&out)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) out[r] = warp_sum(s.sum[r]);
  }
};

// Rows read as `Rows` does, with each row's columns split into kParts pieces read by kParts
// warps of the block (their sums meet in shared memory): a block holds kParts times fewer rows.
template <typename Rows, int kParts>
struct SplitColumns : Rows {
  static constexpr int kColumnParts = kParts;
  using Rows::Rows;
};

// The rows of a warp. kSwiglu pairs gate row i with up row rows/2 + i in one warp (its first
// half of rows are gates, the second half the matching ups); the others take consecutive rows,
// so that kRopeKv finds each rotated pair in one warp. A row past the end is clamped (re-read)
// and marked invalid.
template <GemvEpilogue kEpi, int kRows, int kRowWarps>
__device__ __forceinline__ void warp_rows(const DecodeGemvArgs& a, int warp, int (&rows)[kRows],
                                          bool (&valid)[kRows]) {
  const int global_warp = blockIdx.x * kRowWarps + warp;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    int row;
    if constexpr (kEpi == GemvEpilogue::kSwiglu) {
      const int hidden = a.rows / 2;
      const int out = global_warp * (kRows / 2) + r % (kRows / 2);
      valid[r] = out < hidden;
      row = r < kRows / 2 ? out : hidden + out;
    } else {
      row = global_warp * kRows + r;
      valid[r] = row < a.rows;
    }
    rows[r] = min(row, a.rows - 1);
  }
}

// out += y; with a next norm, also out · g and the sums of squares of out over runs of
// kDecodeSumsqRun rows (a block holds whole runs: its rows are consecutive and a multiple of 8).
// (Reading out and g together with x, before the dot products, instead of here: measured
// slower, 4096x4096 bf16 11.2 -> 14.7 µs.)
template <int kRows, int kRowWarps>
__device__ __forceinline__ void accumulate_epilogue(const DecodeGemvArgs& a, int warp, int lane,
                                                    bool owner, const int (&row)[kRows],
                                                    const bool (&valid)[kRows], const float (&y)[kRows]) {
  constexpr int kBlockRows = kRowWarps * kRows;
  static_assert(kBlockRows % kDecodeSumsqRun == 0);
  __shared__ float squares[kBlockRows];
  // Lane r takes row r, so that the rows' reads of out and g are in flight together (one lane
  // walking the rows waited for each row's reads in turn: int8 2x2 accumulate+norm 4096x4096
  // 10.0 -> 9.0 µs, LLaMA-2-7B int8 decode 367 -> 377 tokens/s at context 128).
  if (lane < kRows && owner) {
    int my_row = row[0];
    bool my_valid = valid[0];
    float my_y = y[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r) {
      if (lane == r) {
        my_row = row[r];
        my_valid = valid[r];
        my_y = y[r];
      }
    }
    float sum = 0.f;
    if (my_valid) {
      const float residual = a.out[my_row];
      const float g = a.next_norm_weight != nullptr ? a.next_norm_weight[my_row] : 0.f;
      sum = residual + my_y;
      a.out[my_row] = sum;
      if (a.next_norm_weight != nullptr) a.next_normed[my_row] = sum * g;
    }
    squares[warp * kRows + lane] = sum * sum;
  }
  if (a.next_norm_weight == nullptr) return;  // uniform across the block
  __syncthreads();
  const int t = threadIdx.x;
  const int run = blockIdx.x * (kBlockRows / kDecodeSumsqRun) + t;
  if (t < kBlockRows / kDecodeSumsqRun && run * kDecodeSumsqRun < a.rows) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kDecodeSumsqRun; ++i) sum += squares[t * kDecodeSumsqRun + i];
    a.next_sumsq[run] = sum;
  }
}

// 1 / rms of the norm's input, from the sum of its sums of squares.
__device__ __forceinline__ float inverse_rms(const DecodeGemvArgs& a, float sumsq) {
  return rsqrtf(sumsq / static_cast<float>(a.cols) + a.eps);
}

// The epilogues that need no other thread, run by one: store the rows, or combine swiglu pairs
// (the first half of the rows are gates, the second half their ups).
template <GemvEpilogue kEpi, int kRows>
__device__ __forceinline__ void write_rows(const DecodeGemvArgs& a, const int (&row)[kRows],
                                           const bool (&valid)[kRows], const float (&y)[kRows]) {
  static_assert(kEpi == GemvEpilogue::kStore || kEpi == GemvEpilogue::kSwiglu);
  if constexpr (kEpi == GemvEpilogue::kStore) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (valid[r]) a.out[row[r]] = y[r];
    }
  } else {
    static_assert(kRows % 2 == 0, "swiglu pairs rows");
#pragma unroll
    for (int j = 0; j < kRows / 2; ++j) {
      const float g = y[j];
      if (valid[j]) a.out[row[j]] = g / (1.f + expf(-g)) * y[kRows / 2 + j];
    }
  }
}

// What the rope epilogue reads besides the rows' sums: the position and each pair's angle.
// Looked up on its own (load_rope_pairs) so that a kernel can ask for it early, while its
// other reads are in flight.
template <int kPairs>
struct RopePairs {
  int position = 0;
  RopeAngle angle[kPairs];
};
template <int kRows>
__device__ __forceinline__ RopePairs<kRows / 2> load_rope_pairs(const DecodeGemvArgs& a,
                                                                const int (&row)[kRows]) {
  static_assert(kRows % 2 == 0, "rope pairs rows");
  RopePairs<kRows / 2> p;
  p.position = load_after_wait(a.rope.positions);
#pragma unroll
  for (int j = 0; j < kRows / 2; ++j) p.angle[j] = rope_angle(a.rope, p.position, row[2 * j]);
  return p;
}

// The rope epilogue, run by one thread: rotate the pairs of rows, store them to q or the cache.
template <int kRows>
__device__ __forceinline__ void write_rope_pairs(const DecodeGemvArgs& a, const int (&row)[kRows],
                                                 const bool (&valid)[kRows], const float (&y)[kRows],
                                                 const RopePairs<kRows / 2>& rope) {
#pragma unroll
  for (int j = 0; j < kRows / 2; ++j) {
    if (valid[2 * j + 1]) {
      rope_kv_pair(a.rope, rope.position, row[2 * j], y[2 * j], y[2 * j + 1], rope.angle[j], a.out);
    }
  }
}

// What follows the dot products of a warp's rows y (the same in every lane): the input norm's
// 1/rms, then the epilogue. Only an owner warp writes (with columns split, the first part's).
template <GemvEpilogue kEpi, bool kNorm, int kRows, int kRowWarps>
__device__ __forceinline__ void finish_rows(const DecodeGemvArgs& a, int warp, int lane,
                                            bool owner, const int (&row)[kRows],
                                            const bool (&valid)[kRows], float (&y)[kRows]) {
  if constexpr (kNorm) {
    // x · g came in as the input; 1 / rms(x) comes from the sums of squares the GEMV that
    // wrote x left behind, summed in the same order in every warp. (Read here rather than
    // while the weights are in flight: measured faster.)
    float sumsq = 0.f;
    for (int i = lane; i < a.sumsq_runs; i += 32) sumsq += load_after_wait(a.in_sumsq + i);
    const float inv_rms = inverse_rms(a, warp_sum(sumsq));
#pragma unroll
    for (int r = 0; r < kRows; ++r) y[r] *= inv_rms;
  }
  if constexpr (kEpi == GemvEpilogue::kAccumulate) {
    accumulate_epilogue<kRows, kRowWarps>(a, warp, lane, owner, row, valid, y);
  } else if (lane == 0 && owner) {
    if constexpr (kEpi == GemvEpilogue::kRopeKv) {
      write_rope_pairs(a, row, valid, y, load_rope_pairs(a, row));
    } else {
      write_rows<kEpi>(a, row, valid, y);
    }
  }
}

// Each warp keeps two bursts of loads in flight: while one is multiplied, the next is on its
// way, and the burst after it is requested as soon as a buffer is free. The first two are
// issued before the wait for the previous kernel. Where Rows splits columns (SplitColumns), a
// warp reads its part of its rows' columns, and the first part's warp adds the others' sums
// and writes the rows.
template <typename Rows, GemvEpilogue kEpi, bool kNorm>
__global__ void __launch_bounds__(kDecodeWarps * 32, Rows::kMinBlocks)
    decode_gemv_kernel(const DecodeGemvArgs a) {
  let_next_kernel_start();
  constexpr int kRows = Rows::kRows, kStep = 32 * Rows::kBurst;
  constexpr int kParts = Rows::kColumnParts, kRowWarps = kDecodeWarps / kParts;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row_warp = warp % kRowWarps, part = warp / kRowWarps;
  int row[kRows];
  bool valid[kRows];
  warp_rows<kEpi, kRows, kRowWarps>(a, row_warp, row, valid);
  const Rows rows(a, row);
  const int units = rows.units(a), part_units = (units + kParts - 1) / kParts;
  const int begin = part * part_units, end = min(units, begin + part_units);
  typename Rows::Sums sums;
  typename Rows::Loaded even, odd;
  rows.load(even, begin + lane, end, a);
  rows.load(odd, begin + kStep + lane, end, a);
  wait_for_previous_kernel();  // x is written by the previous kernel
  for (int start = begin; start < end; start += 2 * kStep) {
    rows.accumulate(sums, even, start + lane, end, a);
    rows.load(even, start + 2 * kStep + lane, end, a);
    if (start + kStep >= end) break;
    rows.accumulate(sums, odd, start + kStep + lane, end, a);
    rows.load(odd, start + 3 * kStep + lane, end, a);
  }
  float y[kRows];
  rows.finish(sums, y);
  if constexpr (kParts > 1) {  // the other parts' sums, added in part order
    __shared__ float part_sums[kParts - 1][kRowWarps][kRows];
    if (part > 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) part_sums[part - 1][row_warp][r] = y[r];
    }
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int p = 0; p < kParts - 1; ++p) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) y[r] += part_sums[p][row_warp][r];
      }
    }
  }
  finish_rows<kEpi, kNorm, kRows, kRowWarps>(a, row_warp, lane, part == 0, row, valid, y);
}

// Blocks for a grid of `a` read as Rows reads it (kRows rows per warp, kColumnParts warps per
// row). Swiglu needs as many: its warps read as many rows, and write half as many outputs.
template <typename Rows>
unsigned decode_gemv_blocks(const DecodeGemvArgs& a) {
  constexpr int kBlockRows = kDecodeWarps / Rows::kColumnParts * Rows::kRows;
  return static_cast<unsigned>((a.rows + kBlockRows - 1) / kBlockRows);
}

template <typename Rows, GemvEpilogue kEpi, bool kNorm>
cudaError_t launch_decode_gemv(const DecodeGemvArgs& a, cudaStream_t stream) {
  return launch_overlapped(decode_gemv_kernel<Rows, kEpi, kNorm>,
                           dim3(decode_gemv_blocks<Rows>(a)),
                           dim3(kDecodeWarps * 32), 0, stream, a);
}

}  // namespace
}  // namespace kuiper::op::cuda
