// What the decode GEMV does after the dot products, shared by its two kernels: the input norm's
// 1/rms, then one epilogue (kernel_table.h, GemvEpilogue). An epilogue receives y[kRows], the
// dot products of the rows a warp (warp kernel) or block (one-pass kernel) took, already scaled
// by 1/rms when there is a norm; row[kRows], their indices (clamped into the matrix); and
// valid[kRows], which of them lie inside it. The rows are ordered as warp_rows
// (decode_gemv_rows.cuh) gives them: consecutive rows, so that each rope pair (2j, 2j + 1) is
// held together; for kSwiglu a warp kernel's warp holds gate rows or up rows, and the one-pass
// kernel's block gates in its first half and the matching ups in the second.
//  - kStore: out[row] = y (several tokens: out[token, row], write_token_rows). kSwiglu:
//    out[i] = silu(gate_i) * up_i.
//  - kRopeKv: rotate each pair and store it to q or the cache (rope_kv.cuh).
//  - kAccumulate: out[row] += y, and with a next norm out · g and the sums of squares of out
//    over runs of kDecodeSumsqRun rows. It synchronises the block, which is why every warp of
//    the warp kernel runs the same loop (rows past the end re-read the last row).
//  - With a.out_int8, kAccumulate's out · g and kSwiglu's out are also written quantized in
//    halves of 16 (quantize_outputs), for the next GEMV: the block gathers its consecutive
//    outputs in shared memory, and its first warp quantizes them.
// What the fusions cost is kept off the weight stream: the norm's sums of squares come with x
// from the GEMV that wrote it (rather than each block reducing x), and a swiglu warp reads
// consecutive rows as a store's does (its gates and ups meet in shared memory at the end):
// half its rows from each half of w1|w3 cost LLaMA-2-7B int4 2% of its decode speed
// (LLaMA-3-8B's none; docs/performance.md, "The decode step").
#pragma once

#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_int8_input.cuh"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

// out += y; with a next norm, also out · g and the sums of squares of out over runs of
// kDecodeSumsqRun rows (a block holds whole runs: its rows are consecutive and a multiple of 8).
// out and g are read here, after the dot products: read together with x they held the weight
// stream back (docs/performance.md).
template <int kRows, int kRowWarps>
__device__ __forceinline__ void accumulate_epilogue(const DecodeGemvArgs& a, int warp, int lane,
                                                    bool owner, const int (&row)[kRows],
                                                    const bool (&valid)[kRows], const float (&y)[kRows]) {
  constexpr int kBlockRows = kRowWarps * kRows;
  static_assert(kBlockRows % kDecodeSumsqRun == 0);
  __shared__ float squares[kBlockRows];
  __shared__ float handed[kBlockRows];  // out · g, where it goes on quantized
  // Lane r takes row r, so that the rows' reads of out and g are in flight together (one lane
  // walking the rows waits for each row's reads in turn).
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
    float sum = 0.f, normed = 0.f;
    if (my_valid) {
      const float residual = a.out[my_row];
      const float g = a.next_norm_weight != nullptr ? a.next_norm_weight[my_row] : 0.f;
      sum = residual + my_y;
      normed = sum * g;
      a.out[my_row] = sum;
      if (a.next_norm_weight != nullptr) a.next_normed[my_row] = normed;
    }
    squares[warp * kRows + lane] = sum * sum;
    handed[warp * kRows + lane] = normed;
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
  if constexpr (kBlockRows % 16 == 0) {
    if (a.out_int8 != nullptr && t < 32) quantize_outputs<kBlockRows>(a, handed, blockIdx.x * kBlockRows, a.rows);
  }
}

// silu(gate) · up, for one pair of swiglu rows.
__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.f + expf(-gate)) * up; }

// kSwiglu: the block's first kRowWarps / 2 warps read gate rows and the others the matching up
// rows (warp_rows), kRows consecutive rows a warp; their sums meet in shared memory, and the
// block writes out[i] = silu(gate_i) · up_i for its kRowWarps / 2 · kRows consecutive outputs,
// with a.out_int8 quantized as well (from gate_up[0], where each thread leaves its output).
template <int kRows, int kRowWarps>
__device__ __forceinline__ void swiglu_epilogue(const DecodeGemvArgs& a, int warp, int lane, bool owner,
                                                const float (&y)[kRows]) {
  static_assert(kRowWarps % 2 == 0, "swiglu pairs the block's gate warps with its up warps");
  constexpr int kHalfWarps = kRowWarps / 2, kBlockOutputs = kHalfWarps * kRows;
  __shared__ float gate_up[2][kBlockOutputs];
  if (lane < kRows && owner) {
    float my_y = y[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r) {
      if (lane == r) my_y = y[r];
    }
    gate_up[warp / kHalfWarps][warp % kHalfWarps * kRows + lane] = my_y;
  }
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x), hidden = a.rows / 2;
  const int out = static_cast<int>(blockIdx.x) * kBlockOutputs + t;
  if (t < kBlockOutputs) {
    const float h = silu_times(gate_up[0][t], gate_up[1][t]);
    if (out < hidden) a.out[out] = h;
    gate_up[0][t] = out < hidden ? h : 0.f;
  }
  if constexpr (kBlockOutputs % 16 == 0) {
    if (a.out_int8 == nullptr) return;  // uniform across the block
    __syncthreads();
    if (t < 32) quantize_outputs<kBlockOutputs>(a, gate_up[0], static_cast<int>(blockIdx.x) * kBlockOutputs, hidden);
  }
}

// The epilogues that need no other thread, run by one: store the rows, add them to out (the
// one-pass kernel's residual accumulate, which hands no norm on), or combine swiglu pairs (the
// first half of the rows are gates, the second half their ups: the one-pass kernel's swiglu).
template <GemvEpilogue kEpi, int kRows>
__device__ __forceinline__ void write_rows(const DecodeGemvArgs& a, const int (&row)[kRows],
                                           const bool (&valid)[kRows], const float (&y)[kRows]) {
  static_assert(kEpi != GemvEpilogue::kRopeKv);
  if constexpr (kEpi == GemvEpilogue::kStore) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (valid[r]) a.out[row[r]] = y[r];
    }
  } else if constexpr (kEpi == GemvEpilogue::kAccumulate) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (valid[r]) a.out[row[r]] += y[r];
    }
  } else {
    static_assert(kRows % 2 == 0, "swiglu pairs rows");
#pragma unroll
    for (int j = 0; j < kRows / 2; ++j) {
      const float g = y[j];
      if (valid[j]) a.out[row[j]] = silu_times(g, y[kRows / 2 + j]);
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
      rope_kv_pair(a.rope, rope.position, rope.position, row[2 * j], y[2 * j], y[2 * j + 1], rope.angle[j],
                   a.out);
    }
  }
}

// The multi-token store, run by one thread: out[token, row] = y[t][r] for the tokens
// first_token + t that exist (out is [a.tokens, a.rows]).
template <int kTokens, int kRows>
__device__ __forceinline__ void write_token_rows(const DecodeGemvArgs& a, int first_token, const int (&row)[kRows],
                                                 const bool (&valid)[kRows], const float (&y)[kTokens][kRows]) {
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    if (first_token + t < a.tokens) {
      float* out = a.out + static_cast<int64_t>(first_token + t) * a.rows;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (valid[r]) out[row[r]] = y[t][r];
      }
    }
  }
}

// InputNorm::kGivenSums: x · g came in as the input, and 1 / rms(x) comes from the sums of
// squares the GEMV that wrote x left behind (a.in_sumsq, one per run). A block reads them once,
// right after the wait, while its first weight bursts are still on their way: thread t adds runs
// t, t + blockDim.x, ... into partial[t], which every warp adds up, in the same order, at its
// end (after a barrier). Every warp reading all the runs at its end held each warp's registers
// for another round trip: 4-5% of the copy bandwidth on LLaMA-2-7B's w1|w3 (docs/performance.md);
// each warp reading them into registers before the stream spilled.
struct InputNormSums {
  float partial[kDecodeWarps * 32];

  __device__ void stage(const DecodeGemvArgs& a) {
    float sum = 0.f;
    for (int i = threadIdx.x; i < a.sumsq_runs; i += blockDim.x) sum += load_after_wait(a.in_sumsq + i);
    partial[threadIdx.x] = sum;
  }
  __device__ float inverse_rms(const DecodeGemvArgs& a, int lane) const {
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kDecodeWarps; ++k) sum += partial[k * 32 + lane];
    return cuda::inverse_rms(a, warp_sum(sum));
  }
};

// What follows the dot products of a warp's rows y (the same in every lane): the input norm's
// 1/rms, then the epilogue. Only an owner warp writes (with columns split, the first part's).
template <GemvEpilogue kEpi, bool kNorm, int kRows, int kRowWarps>
__device__ __forceinline__ void finish_rows(const DecodeGemvArgs& a, int warp, int lane,
                                            bool owner, const int (&row)[kRows],
                                            const bool (&valid)[kRows], float (&y)[kRows],
                                            const InputNormSums& norm) {
  if constexpr (kNorm) {
    const float inv_rms = norm.inverse_rms(a, lane);
#pragma unroll
    for (int r = 0; r < kRows; ++r) y[r] *= inv_rms;
  }
  if constexpr (kEpi == GemvEpilogue::kAccumulate) {
    accumulate_epilogue<kRows, kRowWarps>(a, warp, lane, owner, row, valid, y);
  } else if constexpr (kEpi == GemvEpilogue::kSwiglu) {
    swiglu_epilogue<kRows, kRowWarps>(a, warp, lane, owner, y);
  } else if (lane == 0 && owner) {
    if constexpr (kEpi == GemvEpilogue::kRopeKv) {
      write_rope_pairs(a, row, valid, y, load_rope_pairs(a, row));
    } else {
      write_rows<kEpi>(a, row, valid, y);
    }
  }
}

}  // namespace
}  // namespace kuiper::op::cuda
