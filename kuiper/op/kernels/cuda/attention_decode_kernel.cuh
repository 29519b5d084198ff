// Decode attention over a 16-bit cache with head_dim 64 or 128: one query row over a contiguous
// cache (attention_decode_kernel below) or rows of several sequences over a paged one
// (paged_attention.cu), both through decode_attention_block, which takes where each position's
// K and V live from a row map and folds each row it reads into the softmax of one or several
// query heads of the row's KV head. The KV cache is the one large thing it reads, so the kernel
// streams it like the GEMVs stream weights. Each warp owns a share of the split's rows and
// keeps everything in registers: a lane holds head_dim / 32 dimensions of the query, of the
// running output and of each K and V row; a warp has two chunks of kChunk rows of K and V in
// flight, folding one in while the next loads; the chunk's scores are summed over the warp into
// a lane each, which takes its exponential for the online softmax (fold_chunk). No shared-memory
// tiles and no block-wide barrier until the warps of the block merge their results at the end:
// the tiled kernel of attention_kernels.cuh, which stages 64-row tiles in shared memory and
// synchronises the block four times per tile, measured slower, at best as fast
// (docs/performance.md, "Measurements behind other choices"). Results use the tiled kernel's
// format: the normalised output for one split, otherwise unnormalised partial sums with their
// max and sum, which attention_combine_kernel merges, or, for one sequence, the last range of
// each head to finish (merge_ranges_if_last).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/attention_kernels.cuh"
#include "kuiper/op/kernels/cuda/head_slice.cuh"

namespace kuiper::op::cuda {

inline constexpr int kDecodeAttentionWarps = 4;
// K and V rows a warp loads per chunk. Each warp keeps two chunks in flight
// (decode_attention_block), so that it does not wait a round trip per chunk; two chunks of 8
// hold as many rows as one of 16 and keep the occupancy (paged, head_dim 128: 123 registers,
// four blocks a multiprocessor), and read faster than one of 16 (docs/performance.md).
inline constexpr int kDecodeAttentionChunk = 8;

// Where position j of the sequence a block attends to keeps its K and V: here cache row j. A
// map with kLookup (paged_attention.cu) reads a table instead and returns an int32 row, or -1
// for a position it cannot find (the loop skips it). The chunk loop asks it once per lane, lane
// i for position i % kChunk of a chunk rather than every lane for every position, as soon as the
// chunk before has been loaded (the table read is in flight while a chunk is folded in), and
// shuffles the rows to the lanes.
struct ContiguousRows {
  static constexpr bool kLookup = false;
  __device__ int64_t operator()(int64_t position) const { return position; }
};

// Where a decode attention block writes, for query head row `head_row` (query row × n_heads +
// head): the normalised output when the positions are not split, else split `split`'s partial
// result (unnormalised output, maximum and sum) for attention_combine_kernel.
struct DecodeOutput {
  AttentionOutput out;     // [head rows, head_dim], when splits == 1
  float* partial_out;      // [head rows, splits, head_dim]
  float* partial_max_sum;  // [head rows, splits, 2]
  int64_t head_row;
  int split, splits;
};

// Whether a block's range [begin, end) holds a position. A split past the row's length writes
// nothing (the combine reads only the splits the length reaches); an unsplit row with no
// position gets zeros rather than garbage, for each of the block's `heads` consecutive head rows.
__device__ __forceinline__ bool decode_range_nonempty(int64_t begin, int64_t end, int head_dim, int heads,
                                                      const DecodeOutput& o) {
  if (begin < end) return true;
  if (o.splits == 1) {
    for (int i = threadIdx.x; i < heads * head_dim; i += blockDim.x) o.out.store(o.head_row * head_dim + i, 0.f);
  }
  return false;
}

// Where head `h` of a block whose first head writes through `o` writes: the next head rows.
__device__ __forceinline__ DecodeOutput output_of_head(const DecodeOutput& o, int h) {
  DecodeOutput head = o;
  head.head_row += h;
  return head;
}

// Merges the running results of a block's kWarps warps, which each left in shared memory (warp
// w's outputs at acc_s[w * stride + e], its maximum m_s[w] and sum l_s[w]), and writes them:
// out = Σ_w acc_w·e^(m_w−M), with sum Σ_w l_w·e^(m_w−M). A warp that read no position (m_w = −∞)
// adds nothing; a block none of whose warps read one writes zeros, or m = −∞ and sum 0.
template <int kWarps>
__device__ __forceinline__ void store_merged_warps(const float* acc_s, int stride, const float* m_s,
                                                   const float* l_s, int head_dim, const DecodeOutput& o) {
  float max_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, m_s[w]);
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    float out = 0.f, sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float scale = m_s[w] == -INFINITY ? 0.f : expf(m_s[w] - max_all);
      out += acc_s[w * stride + e] * scale;
      sum += l_s[w] * scale;
    }
    if (o.splits == 1) {
      o.out.store(o.head_row * head_dim + e, sum > 0.f ? out / sum : 0.f);
    } else {
      const int64_t slot = o.head_row * o.splits + o.split;
      o.partial_out[slot * head_dim + e] = out;
      if (e == 0) {
        o.partial_max_sum[slot * 2] = max_all;
        o.partial_max_sum[slot * 2 + 1] = sum;
      }
    }
  }
}

// kChunk positions' K and V rows of one warp, loaded before the first is used.
template <typename T, int kDims, int kChunk>
struct DecodeChunk {
  HeadSlice<T, kDims> k[kChunk], v[kChunk];
  bool found[kChunk];  // kLookup: whether the position has a row
};

// A warp's running softmax over its positions: lane l holds dimensions l·kDims .. of the
// query (pre-scaled) and of the output, m the maximum score so far and l the sum of weights.
template <int kDims>
struct DecodeSoftmax {
  float q[kDims], acc[kDims] = {}, m = -INFINITY, l = 0.f;
};

// One step of warp_reduce_scatter: lanes `offset` apart keep different halves of v[0, 2·kHalf)
// (the lane with that bit set the upper) and add their partner's copy of the half they keep.
template <int kHalf, int kValues>
__device__ __forceinline__ void halve_over_lanes(float (&v)[kValues], int offset) {
  const bool upper = threadIdx.x & offset;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = upper ? v[i] : v[i + kHalf];
    v[i] = (upper ? v[i + kHalf] : v[i]) + __shfl_xor_sync(0xffffffffu, send, offset);
  }
}

// Sums each of a lane's kValues values over the warp and leaves lane l the sum of value
// l / (32 / kValues) (kValues a power of two up to 32). A butterfly that halves what it carries
// at each step, so its first steps take kValues - 1 shuffles in all where summing every value
// over the warp takes 5 each (40 for a chunk of 8 positions of one head, 160 for four heads).
template <int kValues>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[kValues]) {
  static_assert(kValues >= 1 && kValues <= 32 && (kValues & (kValues - 1)) == 0, "a power of two up to 32");
  int offset = 16;
  if constexpr (kValues >= 32) halve_over_lanes<16>(v, offset), offset /= 2;
  if constexpr (kValues >= 16) halve_over_lanes<8>(v, offset), offset /= 2;
  if constexpr (kValues >= 8) halve_over_lanes<4>(v, offset), offset /= 2;
  if constexpr (kValues >= 4) halve_over_lanes<2>(v, offset), offset /= 2;
  if constexpr (kValues >= 2) halve_over_lanes<1>(v, offset), offset /= 2;
  float sum = v[0];
  for (; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  return sum;
}

// Folds the chunk of positions first .. first + kChunk - 1 (those before end) into the softmax of
// each of kHeads query heads. The chunk's K and V rows are widened once for all of them. Each
// (head, position) score is summed over the warp into its own lanes (warp_reduce_scatter), which
// take its exponential and hand the weight to every lane for the values: one exponential a lane
// rather than every lane taking every weight's.
template <typename T, int kDims, int kChunk, int kHeads, bool kLookup>
__device__ __forceinline__ void fold_chunk(DecodeSoftmax<kDims> (&sm)[kHeads], const DecodeChunk<T, kDims, kChunk>& c,
                                           int64_t first, int64_t end) {
  constexpr int kValues = kHeads * kChunk;  // score s[h * kChunk + r]: head h, position first + r
  constexpr int kLanesPerValue = 32 / kValues;
  static_assert(kValues <= 32 && 32 % kValues == 0, "a warp's lanes hold the chunk's scores");
  float s[kValues];
#pragma unroll
  for (int r = 0; r < kChunk; ++r) {
    float kf[kDims];
    c.k[r].widen(kf);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      s[h * kChunk + r] = 0.f;
#pragma unroll
      for (int d = 0; d < kDims; ++d) s[h * kChunk + r] += sm[h].q[d] * kf[d];
    }
  }
  const int lane = threadIdx.x % 32;
  const int mine = lane / kLanesPerValue, my_head = mine / kChunk, my_position = mine % kChunk;
  float score = warp_reduce_scatter<kValues>(s);
  bool skip = first + my_position >= end;
  if constexpr (kLookup) {
    unsigned found = 0;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) found |= static_cast<unsigned>(c.found[r]) << r;
    skip = skip || !(found >> my_position & 1u);
  }
  if (skip) score = -INFINITY;
  // The chunk's maximum for this lane's head: over the lanes of its kChunk positions.
  float chunk_max = score;
#pragma unroll
  for (int offset = kLanesPerValue; offset < kLanesPerValue * kChunk; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  float my_max = -INFINITY;
  bool folds[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    const float head_max =
        kHeads == 1 ? chunk_max : __shfl_sync(0xffffffffu, chunk_max, h * kChunk * kLanesPerValue);
    // kLookup: no position of the chunk has a row. Otherwise some position is valid, and the
    // maximum finite.
    folds[h] = !kLookup || head_max != -INFINITY;
    const float new_max = fmaxf(sm[h].m, head_max);
    if (h == my_head) my_max = new_max;
    if (!folds[h]) continue;
    const float rescale = expf(sm[h].m - new_max);  // 0 on the first chunk
    sm[h].m = new_max;
    sm[h].l *= rescale;
#pragma unroll
    for (int d = 0; d < kDims; ++d) sm[h].acc[d] *= rescale;
  }
  const float my_weight = score == -INFINITY ? 0.f : expf(score - my_max);
#pragma unroll
  for (int r = 0; r < kChunk; ++r) {
    float vf[kDims];
    c.v[r].widen(vf);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (!folds[h]) continue;
      const float w = __shfl_sync(0xffffffffu, my_weight, (h * kChunk + r) * kLanesPerValue);
      sm[h].l += w;
#pragma unroll
      for (int d = 0; d < kDims; ++d) sm[h].acc[d] += w * vf[d];
    }
  }
}

// One block of kDecodeAttentionWarps warps: `heads` (at most kHeads) consecutive query heads of
// one KV head (the first at q_first, head_dim = 32 · kDims values each) over positions
// [begin, end) of its sequence, position j's K and V in cache row row_of(j) (k_base and v_base
// point at the KV head in cache row 0, rows kv_dim elements apart). Several heads share the
// loads of their KV head's rows and the lane work of each chunk (fold_chunk). Each warp keeps
// two chunks in flight: the next one loads while the current one is folded in, so a warp
// that walks several chunks pays one round trip, not one per chunk. A block of fewer than kHeads
// heads folds its first head's query in the rest and writes only its own. The block has kWarps
// warps.
template <typename T, int kDims, int kHeads, typename RowOf, int kWarps = kDecodeAttentionWarps>
__device__ __forceinline__ void decode_attention_block(const float* q_first, int heads, float scale, const T* k_base,
                                                       const T* v_base, int64_t kv_dim, int64_t begin,
                                                       int64_t end, const RowOf& row_of,
                                                       const DecodeOutput& o) {
  constexpr int kHd = 32 * kDims, kChunk = kDecodeAttentionChunk;
  constexpr bool kLookup = RowOf::kLookup;
  if (!decode_range_nonempty(begin, end, kHd, heads, o)) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  DecodeSoftmax<kDims> sm[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    const float* q_head = q_first + (h < heads ? h : 0) * kHd;
#pragma unroll
    for (int d = 0; d < kDims; ++d) sm[h].q[d] = q_head[lane * kDims + d] * scale;
  }
  constexpr int kStride = kWarps * kChunk;
  // Past the end, re-read the last position; a position without a row reads row 0. Either gets
  // weight 0 in fold_chunk.
  const auto look_up = [&](int64_t chunk) { return row_of(min(chunk + lane % kChunk, end - 1)); };
  int32_t looked_up = 0;  // kLookup: the row of this lane's position of the next chunk to load
  if constexpr (kLookup) looked_up = look_up(begin + warp * kChunk);
  // Queues the loads of the chunk at `first` (when it lies before end) and looks up the rows
  // of the chunk after it.
  const auto load = [&](DecodeChunk<T, kDims, kChunk>& c, int64_t first) {
    if (first >= end) return;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      int64_t row;
      if constexpr (kLookup) {
        const int32_t found_row = __shfl_sync(0xffffffffu, looked_up, r);
        c.found[r] = found_row >= 0;
        row = max(found_row, 0);
      } else {
        row = row_of(min(first + r, end - 1));
      }
      c.k[r].load(k_base + row * kv_dim, lane);
      c.v[r].load(v_base + row * kv_dim, lane);
    }
    if constexpr (kLookup) looked_up = look_up(first + kStride);
  };
  DecodeChunk<T, kDims, kChunk> even, odd;
  load(even, begin + warp * kChunk);
  // The kernel after this one, launched overlapped (launch.cuh; wo's GEMV where the ranges merge
  // themselves, else the combine), may take its place from here and wait: its launch is off the path,
  // and this block's loads are already queued ahead of anything it brings. Letting wo's GEMV
  // start only as the blocks end measured slower (docs/performance.md).
  let_next_kernel_start();
  for (int64_t first = begin + warp * kChunk; first < end; first += 2 * kStride) {
    load(odd, first + kStride);
    fold_chunk<T, kDims, kChunk, kHeads, kLookup>(sm, even, first, end);
    if (first + kStride >= end) break;
    load(even, first + 2 * kStride);
    fold_chunk<T, kDims, kChunk, kHeads, kLookup>(sm, odd, first + kStride, end);
  }

  __shared__ float acc_s[kHeads][kWarps][kHd];
  __shared__ float m_s[kHeads][kWarps], l_s[kHeads][kWarps];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int d = 0; d < kDims; ++d) acc_s[h][warp][lane * kDims + d] = sm[h].acc[d];
    if (lane == 0) {
      m_s[h][warp] = sm[h].m;
      l_s[h][warp] = sm[h].l;
    }
  }
  __syncthreads();
  for (int h = 0; h < heads; ++h) {
    store_merged_warps<kWarps>(&acc_s[h][0][0], kHd, m_s[h], l_s[h], kHd, output_of_head(o, h));
  }
}

// Called by every block of a head whose range held a position, after it wrote its partial
// result: the block that arrives last on the head's counter (of `used` blocks) merges the
// partial results (merge_splits, as attention_combine_kernel does) and writes the output, then
// sets the counter back to zero for the next step (or the next replay of a graph). This spares a
// step one launch and one wait per layer. The block has kThreads threads.
template <int kThreads>
__device__ __forceinline__ void merge_ranges_if_last(int* arrival, int used, int head_dim, const DecodeOutput& o) {
  __shared__ bool last_s;
  __threadfence();  // this block's partial result is visible to the block that merges
  __syncthreads();
  if (threadIdx.x == 0) {
    last_s = atomicAdd(arrival, 1) == used - 1;
    if (last_s) {
      *arrival = 0;      // every other block of the head has counted itself in
      __threadfence();   // and the block reads their results after their counts
    }
  }
  __syncthreads();
  if (!last_s) return;
  // The other blocks' results are read through L2 (__ldcg), past this multiprocessor's L1, which
  // other multiprocessors' writes do not update.
  merge_splits<kThreads>(o.partial_out, o.partial_max_sum, o.head_row, o.splits, used, head_dim, o.out,
                         [](const float* p) { return __ldcg(p); });
}

namespace {  // internal linkage, as attention_kernels.cuh's kernels

// One block per (query head, split). Query heads that share a KV head read the same rows; the
// second and later reads of a row come from L2 (blocks of several query heads, as paged attention
// takes for many rows, lost here: one sequence has too few blocks to spare). With p.arrivals the
// ranges merge themselves (merge_ranges_if_last), and a row of one range writes its output whole.
// Blocks of kWarps warps (attention_cuda.cu picks them).
template <typename T, int kDims, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_kernel(const AttentionParams<T> p) {
  constexpr int kHd = 32 * kDims;
  const int head = blockIdx.x, split = blockIdx.y;
  const int64_t kv_offset = static_cast<int64_t>(head / p.group) * kHd;
  const int64_t length = attended_length(p.positions, 0, p.context);
  const int64_t begin = static_cast<int64_t>(split) * p.span;
  const int64_t end = min(begin + p.span, length);
  const int used = static_cast<int>((length + p.span - 1) / p.span);
  const bool whole = p.splits == 1 || (p.arrivals != nullptr && used <= 1 && split == 0);
  const DecodeOutput o{p.out, p.partial_out, p.partial_max_sum, head, split, whole ? 1 : p.splits};
  decode_attention_block<T, kDims, 1, ContiguousRows, kWarps>(p.q + head * kHd, 1, p.scale, p.k_cache + kv_offset,
                                                              p.v_cache + kv_offset, p.kv_dim, begin, end,
                                                              ContiguousRows{}, o);
  if (p.arrivals != nullptr && !whole && begin < end) {
    merge_ranges_if_last<kWarps * 32>(p.arrivals + head, used, kHd, o);
  }
}

}  // namespace
}  // namespace kuiper::op::cuda
