// Device code for prefill attention on the tensor cores (flash-attention style, mma.sync), over
// an fp16 or bf16 cache with head_dim 64 or 128.
//
// A block serves kPrefillQueryRows query rows of one head, one warp per 16 rows. It walks the
// cache rows its queries may see in tiles of kPrefillKeyRows, K and V tiles double-buffered in
// shared memory with asynchronous copies (the next tile lands while this one is used). Per
// tile, each warp computes its 16 x 64 scores S = Q·Kᵀ on the tensor cores, masks keys past
// each row's own position, updates the online softmax in registers (running max and sum per
// row), and accumulates O += P·V, P taken straight from the score registers: the accumulator
// layout of two adjacent 8-key tiles is the operand layout of one 16-key step.
//
// Precision: Q is scaled by log2(e)/sqrt(head_dim) (so that exp2 gives the softmax) and
// rounded to the cache's 16-bit type, and P is rounded the same way, as the prefill GEMMs
// round activations; sums are fp32.
//
// Positions stay on the device: a block attends cache rows 0..max(positions of its rows), and
// each row masks keys past its own position, so any positions give the right result; the
// consecutive positions the model passes make the ranges tight (a causal chunk). Rows whose
// position is outside the cache get zeros, as in the CUDA-core kernel.
#pragma once

#include <cstdint>

#include "kuiper/op/kernels/cuda/attention_output.cuh"
#include "kuiper/op/kernels/cuda/tensor_core_ops.cuh"

namespace kuiper::op::cuda {

inline constexpr int kPrefillWarps = 4;
inline constexpr int kPrefillThreads = kPrefillWarps * 32;
inline constexpr int kPrefillQueryRows = kPrefillWarps * 16;  // one 16-row mma tile per warp
inline constexpr int kPrefillKeyRows = 64;                    // cache rows per tile
// Shared-memory rows are padded by 16 bytes: eight ldmatrix row addresses then fall in
// different banks (an unpadded 256-byte row stride would put them all in one).
inline constexpr int kPrefillRowPad = 8;

template <typename T>
struct PrefillParams {
  const float* q;            // [tokens, n_heads * head_dim]
  const T* k_cache;          // [context, kv_dim]
  const T* v_cache;
  const int32_t* positions;  // [tokens]
  AttentionOutput out;       // [tokens, n_heads * head_dim]
  int tokens, n_heads, group;
  int64_t context, kv_dim;
  float q_scale;  // log2(e) / sqrt(head_dim)
};

// K and V tiles, two buffers each.
template <int kHeadDim>
constexpr size_t prefill_shared_bytes() {
  return 2 * 2 * size_t{kPrefillKeyRows} * (kHeadDim + kPrefillRowPad) * 2;
}

// Fragment coordinates used below, for lane l: g = l / 4 and c = l % 4. An mma accumulator
// d[4] holds row g (d[0], d[1]) and row g + 8 (d[2], d[3]) at columns 2c and 2c + 1; an A
// operand a[4] holds (row g, cols 2c..) (row g + 8, cols 2c..) (row g, cols 8 + 2c..) (row
// g + 8, cols 8 + 2c..); a B operand b0, b1 holds rows 2c.. and 8 + 2c.. of column g.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kPrefillThreads, 2)
    prefill_attention_kernel(const PrefillParams<T> p) {
  constexpr int kStride = kHeadDim + kPrefillRowPad;  // elements per shared-memory row
  constexpr int kTileElems = kPrefillKeyRows * kStride;
  constexpr int kDimSteps = kHeadDim / 16;             // k-steps of Q·Kᵀ
  constexpr int kKeyTiles = kPrefillKeyRows / 8;       // 8-key column tiles of S
  constexpr int kDimTiles = kHeadDim / 8;              // 8-dim column tiles of O
  constexpr int kChunksPerRow = kHeadDim * 2 / 16;     // 16-byte copies per cache row
  extern __shared__ __align__(16) unsigned char prefill_smem[];
  T* const k_tiles = reinterpret_cast<T*>(prefill_smem);
  T* const v_tiles = k_tiles + 2 * kTileElems;
  __shared__ int warp_keys_s[kPrefillWarps];

  const int head = blockIdx.x, kv_head = head / p.group;
  // Query tiles in reverse: the longest (last) rows start first, the short ones fill the gaps.
  const int first_row = (gridDim.y - 1 - blockIdx.y) * kPrefillQueryRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int row_lo = first_row + warp * 16 + g, row_hi = row_lo + 8;
  const int64_t q_dim = static_cast<int64_t>(p.n_heads) * kHeadDim;

  // Cache rows each of this thread's two rows sees: 0..position, none for padding rows and
  // positions outside the cache.
  const auto keys_of = [&](int row) -> int {
    if (row >= p.tokens) return 0;
    const int32_t pos = p.positions[row];
    return pos >= 0 && pos < p.context ? pos + 1 : 0;
  };
  const int keys_lo = keys_of(row_lo), keys_hi = keys_of(row_hi);
  const int warp_keys = static_cast<int>(
      __reduce_max_sync(0xffffffffu, static_cast<unsigned>(max(keys_lo, keys_hi))));
  if (lane == 0) warp_keys_s[warp] = warp_keys;
  __syncthreads();
  int block_keys = 0;
#pragma unroll
  for (int w = 0; w < kPrefillWarps; ++w) block_keys = max(block_keys, warp_keys_s[w]);
  const int tiles = (block_keys + kPrefillKeyRows - 1) / kPrefillKeyRows;

  // Rows past block_keys are zero-filled rather than read: beyond the rows written so far the
  // cache may hold anything, NaN included, and 0·NaN would poison the sums.
  const T* const k_head = p.k_cache + static_cast<int64_t>(kv_head) * kHeadDim;
  const T* const v_head = p.v_cache + static_cast<int64_t>(kv_head) * kHeadDim;
  const auto stage = [&](int tile, int buffer) {
    const int first_key = tile * kPrefillKeyRows;
    for (int i = threadIdx.x; i < kPrefillKeyRows * kChunksPerRow; i += kPrefillThreads) {
      const int r = i / kChunksPerRow, col = (i % kChunksPerRow) * 8;
      const bool valid = first_key + r < block_keys;
      const int64_t offset = (valid ? first_key + r : 0) * p.kv_dim + col;
      const int to = buffer * kTileElems + r * kStride + col;
      copy_16_async(k_tiles + to, k_head + offset, valid);
      copy_16_async(v_tiles + to, v_head + offset, valid);
    }
    commit_async_copies();
  };
  if (tiles > 0) stage(0, 0);

  // This warp's queries as A operands, scaled and rounded (padding rows are zeros).
  uint32_t q_frag[kDimSteps][4];
  {
    const float* q_lo = p.q + row_lo * q_dim + head * kHeadDim + 2 * c;
    const float* q_hi = q_lo + 8 * q_dim;
    const bool lo_ok = row_lo < p.tokens, hi_ok = row_hi < p.tokens;
    const float2 zero = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kDimSteps; ++k) {
      const float2 a = lo_ok ? *reinterpret_cast<const float2*>(q_lo + 16 * k) : zero;
      const float2 b = hi_ok ? *reinterpret_cast<const float2*>(q_hi + 16 * k) : zero;
      const float2 d = lo_ok ? *reinterpret_cast<const float2*>(q_lo + 16 * k + 8) : zero;
      const float2 e = hi_ok ? *reinterpret_cast<const float2*>(q_hi + 16 * k + 8) : zero;
      q_frag[k][0] = pack_pair(a.x * p.q_scale, a.y * p.q_scale, T{});
      q_frag[k][1] = pack_pair(b.x * p.q_scale, b.y * p.q_scale, T{});
      q_frag[k][2] = pack_pair(d.x * p.q_scale, d.y * p.q_scale, T{});
      q_frag[k][3] = pack_pair(e.x * p.q_scale, e.y * p.q_scale, T{});
    }
  }

  float o[kDimTiles][4] = {};
  float max_lo = -INFINITY, max_hi = -INFINITY;  // running maxima (log2 units)
  float sum_lo = 0.f, sum_hi = 0.f;              // this thread's share of the running sums
  // ldmatrix addressing: lane l points at row l % 8 of matrix l / 8.
  const int matrix = lane / 8, matrix_row = lane % 8;

  for (int tile = 0; tile < tiles; ++tile) {
    const int buffer = tile % 2;
    if (tile + 1 < tiles) {
      stage(tile + 1, buffer ^ 1);
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();  // everyone's copies of this tile have landed

    const int first_key = tile * kPrefillKeyRows;
    if (first_key < warp_keys) {  // else every key of the tile is past this warp's rows
      const T* const k_tile = k_tiles + buffer * kTileElems;
      const T* const v_tile = v_tiles + buffer * kTileElems;

      // S = Q·Kᵀ. One x4 load gives the B operands of two 8-key tiles: matrices (keys
      // 0-7, dims 0-7) (keys 0-7, dims 8-15) (keys 8-15, dims 0-7) (keys 8-15, dims 8-15).
      float s[kKeyTiles][4] = {};
#pragma unroll
      for (int k = 0; k < kDimSteps; ++k) {
#pragma unroll
        for (int n = 0; n < kKeyTiles; n += 2) {
          uint32_t b[4];
          load_matrices_x4(b, k_tile + (n * 8 + (matrix >> 1) * 8 + matrix_row) * kStride +
                                  k * 16 + (matrix & 1) * 8);
          mma_16x8x16(s[n], q_frag[k], b[0], b[1], T{});
          mma_16x8x16(s[n + 1], q_frag[k], b[2], b[3], T{});
        }
      }

      // Causal mask and online softmax. A row's 64 scores are spread over the 4 lanes that
      // share g: maxima are combined across them; sums stay per lane until the end.
      float tile_max_lo = -INFINITY, tile_max_hi = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int key = first_key + n * 8 + 2 * c + j;
          s[n][j] = key < keys_lo ? s[n][j] : -INFINITY;
          s[n][2 + j] = key < keys_hi ? s[n][2 + j] : -INFINITY;
          tile_max_lo = fmaxf(tile_max_lo, s[n][j]);
          tile_max_hi = fmaxf(tile_max_hi, s[n][2 + j]);
        }
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset *= 2) {
        tile_max_lo = fmaxf(tile_max_lo, __shfl_xor_sync(0xffffffffu, tile_max_lo, offset));
        tile_max_hi = fmaxf(tile_max_hi, __shfl_xor_sync(0xffffffffu, tile_max_hi, offset));
      }
      const float new_max_lo = fmaxf(max_lo, tile_max_lo);
      const float new_max_hi = fmaxf(max_hi, tile_max_hi);
      // A row with no key yet keeps max -inf: subtract 0 instead, so that exp2 gives 0, not NaN.
      const float base_lo = new_max_lo == -INFINITY ? 0.f : new_max_lo;
      const float base_hi = new_max_hi == -INFINITY ? 0.f : new_max_hi;
      const float rescale_lo = exp2f(max_lo - base_lo), rescale_hi = exp2f(max_hi - base_hi);
      max_lo = new_max_lo;
      max_hi = new_max_hi;
      sum_lo *= rescale_lo;
      sum_hi *= rescale_hi;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        s[n][0] = exp2f(s[n][0] - base_lo);
        s[n][1] = exp2f(s[n][1] - base_lo);
        s[n][2] = exp2f(s[n][2] - base_hi);
        s[n][3] = exp2f(s[n][3] - base_hi);
        sum_lo += s[n][0] + s[n][1];
        sum_hi += s[n][2] + s[n][3];
      }
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o[d][0] *= rescale_lo;
        o[d][1] *= rescale_lo;
        o[d][2] *= rescale_hi;
        o[d][3] *= rescale_hi;
      }

      // O += P·V, 16 keys per step. P's A operand is the accumulators of 8-key tiles 2j and
      // 2j + 1; one transposed x4 load gives the B operands of two 8-dim tiles: matrices
      // (keys 0-7, dims 0-7) (keys 8-15, dims 0-7) (keys 0-7, dims 8-15) (keys 8-15, dims 8-15).
#pragma unroll
      for (int j = 0; j < kPrefillKeyRows / 16; ++j) {
        const uint32_t a[4] = {pack_pair(s[2 * j][0], s[2 * j][1], T{}),
                               pack_pair(s[2 * j][2], s[2 * j][3], T{}),
                               pack_pair(s[2 * j + 1][0], s[2 * j + 1][1], T{}),
                               pack_pair(s[2 * j + 1][2], s[2 * j + 1][3], T{})};
#pragma unroll
        for (int d = 0; d < kDimTiles; d += 2) {
          uint32_t b[4];
          load_matrices_x4_transposed(
              b, v_tile + (j * 16 + (matrix & 1) * 8 + matrix_row) * kStride + d * 8 +
                     (matrix >> 1) * 8);
          mma_16x8x16(o[d], a, b[0], b[1], T{});
          mma_16x8x16(o[d + 1], a, b[2], b[3], T{});
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this buffer
  }

#pragma unroll
  for (int offset = 1; offset < 4; offset *= 2) {
    sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, offset);
    sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, offset);
  }
  const float inv_lo = sum_lo > 0.f ? 1.f / sum_lo : 0.f;  // no key: zeros
  const float inv_hi = sum_hi > 0.f ? 1.f / sum_hi : 0.f;
  const int64_t out_lo = row_lo * q_dim + head * kHeadDim + 2 * c;
  const int64_t out_hi = out_lo + 8 * q_dim;
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) {
    if (row_lo < p.tokens) p.out.store_pair(out_lo + d * 8, o[d][0] * inv_lo, o[d][1] * inv_lo);
    if (row_hi < p.tokens) p.out.store_pair(out_hi + d * 8, o[d][2] * inv_hi, o[d][3] * inv_hi);
  }
}

}  // namespace kuiper::op::cuda
