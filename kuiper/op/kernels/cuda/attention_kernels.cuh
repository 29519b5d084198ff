// Device code for causal grouped-query attention over a KV cache (fp32, fp16 or bf16).
//
// One block serves up to kMaxGroup query heads that share one KV head, so each cache row is
// read once for the whole group. The block walks its range of cache rows in tiles: a tile of K
// and of V is copied into shared memory with asynchronous copies issued all at once (the whole
// tile is in flight in one memory round trip, V arriving while the scores are computed), the
// scores go to shared memory (one warp per row), the softmax runs online (running max and sum
// per head, earlier sums rescaled), and the weighted values accumulate in registers (each
// thread owns one pair of output dimensions for every head of the group, over a strided subset
// of the tile's rows).
//
// Decode splits the cache into ranges, one block each, writing unnormalised partial results
// that attention_combine_kernel merges (flash-decoding); prefill gives each query row one block
// covering all of its rows, which normalises and writes the output directly.
#pragma once

#include <cuda_pipeline.h>

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/attention_output.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / 32;
inline constexpr int kMaxGroup = 8;          // query heads per block
inline constexpr int kMaxHeadDim = 256;      // 2 * kAttentionThreads: one pair per thread
inline constexpr int kMaxTileRows = 64;      // cache rows per shared-memory tile
inline constexpr int kTileBytes = 16 << 10;  // per tile of K (and of V)
inline constexpr int kRowsPerPass = 4;       // score rows a warp reduces together
inline constexpr int kCombineThreads = 512;

template <typename T>
struct AttentionParams {
  const float* q;             // [T, n_heads * head_dim]
  const T* k_cache;           // [context, n_kv_heads * head_dim]
  const T* v_cache;
  const int32_t* positions;   // [T]
  AttentionOutput out;        // [T, n_heads * head_dim], when splits == 1
  float* partial_out;         // [T, n_heads, splits, head_dim], when splits > 1
  float* partial_max_sum;     // [T, n_heads, splits, 2]
  int n_heads, head_dim, group, blocks_per_kv_head;
  int64_t context, kv_dim;
  int span;       // cache rows per split, a multiple of tile_rows
  int splits;     // blocks along the cache; 1 = write normalised output
  // Decode over splits > 1 without a combine launch (attention_decode_kernel): one counter a
  // head, zero between launches; the last range of a head to finish merges them. Null: the
  // combine kernel merges.
  int* arrivals;
  int tile_rows;  // rows per tile: kTileBytes / (head_dim * sizeof(T)), at most kMaxTileRows
  bool wide_copies;  // head rows are 16-byte aligned: copy 16 bytes at a time, else 4
  float scale;
};

// Queues asynchronous copies of `rows` head rows (head_dim elements each, consecutive rows
// kv_dim apart) into a dense shared-memory tile.
template <typename T>
__device__ __forceinline__ void stage_tile(T* tile, const T* first_row, int rows, int64_t kv_dim,
                                           int head_dim, bool wide) {
  const int row_bytes = head_dim * static_cast<int>(sizeof(T));
  const int step = wide ? 16 : 4;
  const int per_row = row_bytes / step;
  char* dst = reinterpret_cast<char*>(tile);
  const char* src = reinterpret_cast<const char*>(first_row);
  const int64_t src_stride = kv_dim * static_cast<int64_t>(sizeof(T));
  for (int i = threadIdx.x; i < rows * per_row; i += kAttentionThreads) {
    const int r = i / per_row, c = (i % per_row) * step;
    if (wide) {
      __pipeline_memcpy_async(dst + r * row_bytes + c, src + r * src_stride + c, 16);
    } else {
      __pipeline_memcpy_async(dst + r * row_bytes + c, src + r * src_stride + c, 4);
    }
  }
}

// Number of cache rows query row t attends to; 0 when its position is outside the cache.
__device__ __forceinline__ int64_t attended_length(const int32_t* positions, int t,
                                                   int64_t context) {
  const int32_t pos = positions[t];
  return pos >= 0 && pos < context ? pos + 1 : 0;
}

// Internal linkage for the kernels: attention_cuda.cu and paged_attention.cu both include this
// header, and without relocatable device code each gets its own copy of every kernel, whose
// host-side launch stubs must not be shared (decode_gemv_args.cuh).
namespace {

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_kernel(const AttentionParams<T> p) {
  const int t = blockIdx.z, split = blockIdx.y;
  const int kv_head = blockIdx.x / p.blocks_per_kv_head;
  const int first_in_group = (blockIdx.x % p.blocks_per_kv_head) * kMaxGroup;
  const int heads = min(kMaxGroup, p.group - first_in_group);  // query heads in this block
  const int head0 = kv_head * p.group + first_in_group;
  const int hd = p.head_dim, pairs = hd / 2;
  const int64_t q_dim = static_cast<int64_t>(p.n_heads) * hd;
  const int64_t length = attended_length(p.positions, t, p.context);
  const int64_t begin = static_cast<int64_t>(split) * p.span;
  const int64_t end = min(begin + p.span, length);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  if (begin >= end) {
    // Splits past the length are ignored by the combine; an unsplit row with no valid
    // position gets zeros rather than garbage.
    if (p.splits == 1) {
      for (int i = tid; i < heads * hd; i += kAttentionThreads) {
        p.out.store(t * q_dim + static_cast<int64_t>(head0) * hd + i, 0.f);
      }
    }
    return;
  }

  extern __shared__ __align__(16) unsigned char tiles_s[];  // K tile, then V tile
  T* k_s = reinterpret_cast<T*>(tiles_s);
  T* v_s = k_s + p.tile_rows * hd;
  __shared__ __align__(16) float q_s[kMaxGroup * kMaxHeadDim];  // scaled queries; at the end, partial sums
  __shared__ float score_s[kMaxGroup][kMaxTileRows];  // scores, then probabilities, of one tile
  __shared__ float max_s[kMaxGroup], sum_s[kMaxGroup], rescale_s[kMaxGroup];

  const T* k_base = p.k_cache + static_cast<int64_t>(kv_head) * hd;
  const T* v_base = p.v_cache + static_cast<int64_t>(kv_head) * hd;
  const auto stage = [&](int64_t first, int rows) {
    stage_tile(k_s, k_base + first * p.kv_dim, rows, p.kv_dim, hd, p.wide_copies);
    __pipeline_commit();
    stage_tile(v_s, v_base + first * p.kv_dim, rows, p.kv_dim, hd, p.wide_copies);
    __pipeline_commit();
  };
  stage(begin, static_cast<int>(min(static_cast<int64_t>(p.tile_rows), end - begin)));

  for (int i = tid; i < heads * hd; i += kAttentionThreads) {
    q_s[i] = p.q[t * q_dim + static_cast<int64_t>(head0) * hd + i] * p.scale;
  }
  if (tid < kMaxGroup) {
    max_s[tid] = -INFINITY;
    sum_s[tid] = 0.f;
  }
  // Value accumulation layout: thread = (row slot, pair of output dimensions).
  const int row_slots = kAttentionThreads / pairs;
  const int my_pair = tid % pairs, row_slot = tid / pairs;
  float2 acc[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) acc[g] = make_float2(0.f, 0.f);

  for (int64_t tile = begin; tile < end; tile += p.tile_rows) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(p.tile_rows), end - tile));
    if (tile != begin) stage(tile, rows);
    __pipeline_wait_prior(1);  // this thread's K copies have landed
    __syncthreads();           // everyone's have, and q_s is written

    // Scores: one warp per row, pairs of elements per lane; kRowsPerPass rows at a time so
    // that their shuffle reductions overlap instead of running back to back.
    for (int r0 = warp * kRowsPerPass; r0 < rows; r0 += kAttentionWarps * kRowsPerPass) {
      float dot[kRowsPerPass][kMaxGroup] = {};
      for (int pair = lane; pair < pairs; pair += 32) {
        float2 kv[kRowsPerPass];
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) {
          // Rows past the tile read row 0 again (valid memory); their sums are not stored.
          kv[r] = load_pair(k_s + (r0 + r < rows ? r0 + r : 0) * hd + 2 * pair);
        }
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g >= heads) break;
          const float2 qv = *reinterpret_cast<const float2*>(&q_s[g * hd + 2 * pair]);
#pragma unroll
          for (int r = 0; r < kRowsPerPass; ++r) dot[r][g] += qv.x * kv[r].x + qv.y * kv[r].y;
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= heads) break;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
          for (int r = 0; r < kRowsPerPass; ++r) {
            dot[r][g] += __shfl_xor_sync(0xffffffffu, dot[r][g], offset);
          }
        }
        if (lane < kRowsPerPass && r0 + lane < rows) {
          // Lane r stores row r: a register array indexed by a run-time value would spill, so
          // pick the value with compile-time indices.
          float mine = dot[0][g];
#pragma unroll
          for (int r = 1; r < kRowsPerPass; ++r) mine = lane == r ? dot[r][g] : mine;
          score_s[g][r0 + lane] = mine;
        }
      }
    }
    __syncthreads();

    // Online softmax: one warp per head.
    for (int g = warp; g < heads; g += kAttentionWarps) {
      float tile_max = -INFINITY;
      for (int r = lane; r < rows; r += 32) tile_max = fmaxf(tile_max, score_s[g][r]);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      }
      const float old_max = max_s[g], new_max = fmaxf(old_max, tile_max);
      float tile_sum = 0.f;
      for (int r = lane; r < rows; r += 32) {
        const float e = expf(score_s[g][r] - new_max);
        score_s[g][r] = e;
        tile_sum += e;
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, offset);
      }
      __syncwarp();
      if (lane == 0) {
        const float rescale = expf(old_max - new_max);  // 0 on the first tile
        rescale_s[g] = rescale;
        sum_s[g] = sum_s[g] * rescale + tile_sum;
        max_s[g] = new_max;
      }
    }
    __pipeline_wait_prior(0);  // V copies
    __syncthreads();

    // Weighted values.
    if (row_slot < row_slots) {
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= heads) break;
        acc[g].x *= rescale_s[g];
        acc[g].y *= rescale_s[g];
      }
#pragma unroll 4
      for (int r = row_slot; r < rows; r += row_slots) {
        const float2 vv = load_pair(v_s + r * hd + 2 * my_pair);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g >= heads) break;
          const float w = score_s[g][r];
          acc[g].x += w * vv.x;
          acc[g].y += w * vv.y;
        }
      }
    }
    __syncthreads();  // the next tile overwrites K, V, scores and rescale factors
  }

  // Sum the row slots' accumulators (q_s is free now), then write.
  float* reduce_s = q_s;  // [row_slots][kMaxGroup][hd] fits: row_slots * hd <= 2 * threads
  if (row_slot < row_slots) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= heads) break;
      float* dst = reduce_s + (row_slot * kMaxGroup + g) * hd + 2 * my_pair;
      dst[0] = acc[g].x;
      dst[1] = acc[g].y;
    }
  }
  __syncthreads();
  for (int i = tid; i < heads * hd; i += kAttentionThreads) {
    const int g = i / hd, d = i % hd;
    float total = 0.f;
    for (int s = 0; s < row_slots; ++s) total += reduce_s[(s * kMaxGroup + g) * hd + d];
    const int64_t head_row = static_cast<int64_t>(t) * p.n_heads + head0 + g;
    if (p.splits == 1) {
      p.out.store(head_row * hd + d, total / sum_s[g]);
    } else {
      const int64_t slot = head_row * p.splits + split;
      p.partial_out[slot * hd + d] = total;
      if (d == 0) {
        p.partial_max_sum[slot * 2] = max_s[g];
        p.partial_max_sum[slot * 2 + 1] = sum_s[g];
      }
    }
  }
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Merges the `used` splits of one (query row, head), head row `head_row` (split s's
// unnormalised output at partial_out[(head_row · splits + s) · head_dim], its maximum and sum at
// partial_max_sum[(head_row · splits + s) · 2]): out = Σ o_s·e^(m_s−M) / Σ l_s·e^(m_s−M), or
// zeros where no split read a position (a row without positions; a paged row none of whose
// positions the block table finds). Every thread of a block of kThreads calls it; `load` reads
// what the splits wrote (from another kernel, or from other blocks of this one). The split
// weights are computed once into shared memory; then each thread sums one output dimension over
// a strided subset of the splits (several loads in flight), and the subsets are added up
// through shared memory. Where out asks for it (one query row, head_dim a multiple of 32), the
// output also goes quantized in halves of 16 (int8_halves.cuh), for the int8 or int4 GEMV after
// attention.
template <int kThreads, typename Load>
__device__ __forceinline__ void merge_splits(const float* partial_out, const float* partial_max_sum, int64_t head_row,
                                             int splits, int used, int head_dim, const AttentionOutput& out,
                                             Load load) {
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage reduce_storage;
  __shared__ float weight_s[kDecodeMaxSplits];
  __shared__ float sums_s[kThreads];
  __shared__ float global_max_s, denominator_s;
  const int tid = threadIdx.x;
  const float* max_sum = partial_max_sum + head_row * splits * 2;

  float local_max = -INFINITY;
  for (int s = tid; s < used; s += kThreads) local_max = fmaxf(local_max, load(max_sum + 2 * s));
  const float block_max = Reduce(reduce_storage).Reduce(local_max, MaxOf{});
  if (tid == 0) global_max_s = block_max;
  __syncthreads();
  float local_denominator = 0.f;
  for (int s = tid; s < used; s += kThreads) {
    const float w = expf(load(max_sum + 2 * s) - global_max_s);
    weight_s[s] = w;
    local_denominator += load(max_sum + 2 * s + 1) * w;
  }
  __syncthreads();  // reduce_storage is reused
  const float denominator = Reduce(reduce_storage).Sum(local_denominator);
  if (tid == 0) denominator_s = denominator;
  __syncthreads();

  const int phases = kThreads / head_dim;  // head_dim <= kThreads
  const int d = tid % head_dim, phase = tid / head_dim;
  float numerator = 0.f;
  if (phase < phases) {
    const float* o = partial_out + head_row * splits * head_dim + d;
#pragma unroll 8
    for (int s = phase; s < used; s += phases) numerator += load(o + static_cast<int64_t>(s) * head_dim) * weight_s[s];
  }
  sums_s[tid] = numerator;
  __syncthreads();
  if (tid < head_dim) {  // whole warps, as a quantized output needs
    float total = 0.f;
    for (int k = 0; k < phases; ++k) total += sums_s[k * head_dim + tid];
    out.store(head_row * head_dim + tid, denominator_s > 0.f ? total / denominator_s : 0.f);
  }
}

// The combine kernel: block (head, t) merges query row t's splits of one head (merge_splits).
// One sequence's decode over the tiled kernel launches it overlapped (launch.cuh; the streaming
// kernel merges its ranges itself): it waits for the decode kernel, and
// lets the GEMV after it start only once it is done; letting the GEMV stream its first weights
// while the combine ran measured slower (docs/performance.md).
__global__ void __launch_bounds__(kCombineThreads)
    attention_combine_kernel(const float* partial_out, const float* partial_max_sum,
                             const int32_t* positions, int64_t context, int n_heads,
                             int head_dim, int span, int splits, AttentionOutput out) {
  wait_for_previous_kernel();  // the partial results are written by the decode kernel
  const int head = blockIdx.x, t = blockIdx.y;
  const int64_t length = attended_length(positions, t, context);
  const int used = static_cast<int>((length + span - 1) / span);
  merge_splits<kCombineThreads>(partial_out, partial_max_sum, static_cast<int64_t>(t) * n_heads + head, splits, used,
                                head_dim, out, [](const float* p) { return load_after_wait(p); });
  let_next_kernel_start();
}

}  // namespace

// Split decode attention's partial results in the context's scratch, for `slots` (query row,
// head, range) triples of head_dim values: the unnormalised outputs, then each range's maximum
// and sum.
struct AttentionPartials {
  float* out;
  float* max_sum;
};
inline StatusOr<AttentionPartials> attention_partials(const ExecutionContext& ctx, int64_t slots, int head_dim) {
  KUIPER_ASSIGN_OR_RETURN(void* scratch,
                          ctx.scratch(ScratchUse::kAttentionPartials, attention_partials_bytes(slots, head_dim)));
  float* out = static_cast<float*>(scratch);
  return AttentionPartials{out, out + slots * head_dim};
}

}  // namespace kuiper::op::cuda
