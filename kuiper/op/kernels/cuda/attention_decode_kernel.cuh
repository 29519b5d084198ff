// Decode attention (one query row) over a 16-bit cache with head_dim 64 or 128: the KV cache is
// the one large thing it reads, so the kernel streams it like the GEMVs stream weights. Each
// warp owns a share of the split's rows and keeps everything in registers: a lane holds
// head_dim / 32 dimensions of the query, of the running output and of each K and V row; kChunk
// rows of K and V are loaded before the first is used; the scores are reduced with warp
// shuffles and folded into an online softmax. No shared-memory tiles and no block-wide barrier
// until the warps of the block merge their results at the end.
//
// Measured on an H200 (tools/cuda_kernels_bench, graph replay), 4096 cached rows of 128-wide
// heads: 32 KV heads (LLaMA-2-7B) 38 µs with the tiled kernel of attention_kernels.cuh (which
// stages 64-row tiles in shared memory and synchronises the block four times per tile), 25-29
// µs with this one; 8 KV heads of 4 query heads each (LLaMA-3-8B) 21 µs either way, and at
// 1024 rows 16 -> 10 µs. Decode tokens/s, context 128 / 4096: LLaMA-2-7B 240 / 198 -> 244 /
// 214, LLaMA-3-8B 210 / 201 -> 219 / 201. Results use the tiled kernel's format: the normalised
// output for one split, otherwise unnormalised partial sums with their max and sum for
// attention_combine_kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kuiper/op/kernels/cuda/attention_kernels.cuh"
#include "kuiper/op/kernels/cuda/head_slice.cuh"

namespace kuiper::op::cuda {

inline constexpr int kDecodeAttentionWarps = 4;
// K and V rows a warp has in flight. With 64-row splits, 16 makes every warp's share one
// burst: at short contexts the kernel is bound by round trips, not bytes. LLaMA-2-7B bf16
// decode, context 128 / 1024 / 4096, tokens/s on an H200 with 8 -> 16: 261.3 / 254.0 / 227.0
// -> 265.0 / 255.8 / 231.2 (4 rows in 32-row splits: 261.1 / 254.9 / 230.3); LLaMA-3-8B at
// 128 / 4096 (another H200): 234.4 / 212.3 -> 238.8 / 216.0. Fewer blocks, each looping over
// several splits: no faster at 128, slower at 4096 (8 splits per head: 228.9 -> 217.7).
inline constexpr int kDecodeAttentionChunk = 16;

// One block per (query head, split). Query heads that share a KV head read the same rows; the
// second and later reads of a row come from L2.
template <typename T, int kDims>
__global__ void __launch_bounds__(kDecodeAttentionWarps * 32)
    attention_decode_kernel(const AttentionParams<T> p) {
  const int head = blockIdx.x, split = blockIdx.y, kv_head = head / p.group;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int kHd = 32 * kDims;
  const int64_t length = attended_length(p.positions, 0, p.context);
  const int64_t begin = static_cast<int64_t>(split) * p.span;
  const int64_t end = min(begin + p.span, length);
  if (begin >= end) {
    if (p.splits == 1) {  // no valid position: zeros rather than garbage
      for (int i = threadIdx.x; i < kHd; i += blockDim.x) p.out[head * kHd + i] = 0.f;
    }
    return;
  }

  float q[kDims], acc[kDims], m = -INFINITY, l = 0.f;
#pragma unroll
  for (int d = 0; d < kDims; ++d) {
    q[d] = p.q[head * kHd + lane * kDims + d] * p.scale;
    acc[d] = 0.f;
  }
  const T* k_base = p.k_cache + static_cast<int64_t>(kv_head) * kHd;
  const T* v_base = p.v_cache + static_cast<int64_t>(kv_head) * kHd;
  constexpr int kStride = kDecodeAttentionWarps * kDecodeAttentionChunk;
  for (int64_t first = begin + warp * kDecodeAttentionChunk; first < end; first += kStride) {
    HeadSlice<T, kDims> k[kDecodeAttentionChunk], v[kDecodeAttentionChunk];
#pragma unroll
    for (int r = 0; r < kDecodeAttentionChunk; ++r) {
      const int64_t row = min(first + r, end - 1);  // past the end: re-read, weight 0 below
      k[r].load(k_base + row * p.kv_dim, lane);
      v[r].load(v_base + row * p.kv_dim, lane);
    }
    float s[kDecodeAttentionChunk];
#pragma unroll
    for (int r = 0; r < kDecodeAttentionChunk; ++r) {
      float kf[kDims];
      k[r].widen(kf);
      s[r] = 0.f;
#pragma unroll
      for (int d = 0; d < kDims; ++d) s[r] += q[d] * kf[d];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
      for (int r = 0; r < kDecodeAttentionChunk; ++r) s[r] += __shfl_xor_sync(0xffffffffu, s[r], offset);
    }
    float chunk_max = -INFINITY;
#pragma unroll
    for (int r = 0; r < kDecodeAttentionChunk; ++r) {
      if (first + r >= end) s[r] = -INFINITY;
      chunk_max = fmaxf(chunk_max, s[r]);
    }
    const float new_max = fmaxf(m, chunk_max);  // finite: the chunk's first row is valid
    const float rescale = expf(m - new_max);     // 0 on the first chunk
    m = new_max;
    l *= rescale;
#pragma unroll
    for (int d = 0; d < kDims; ++d) acc[d] *= rescale;
#pragma unroll
    for (int r = 0; r < kDecodeAttentionChunk; ++r) {
      const float w = expf(s[r] - new_max);
      l += w;
      float vf[kDims];
      v[r].widen(vf);
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[d] += w * vf[d];
    }
  }

  // Merge the warps: out = Σ_w acc_w·e^(m_w−M), with sum Σ_w l_w·e^(m_w−M); a warp that had
  // no rows (m_w = −∞) adds nothing.
  __shared__ float acc_s[kDecodeAttentionWarps][kHd];
  __shared__ float m_s[kDecodeAttentionWarps], l_s[kDecodeAttentionWarps];
#pragma unroll
  for (int d = 0; d < kDims; ++d) acc_s[warp][lane * kDims + d] = acc[d];
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
  __syncthreads();
  float max_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kDecodeAttentionWarps; ++w) max_all = fmaxf(max_all, m_s[w]);
  for (int d = threadIdx.x; d < kHd; d += blockDim.x) {
    float out = 0.f, sum = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeAttentionWarps; ++w) {
      const float scale = m_s[w] == -INFINITY ? 0.f : expf(m_s[w] - max_all);
      out += acc_s[w][d] * scale;
      sum += l_s[w] * scale;
    }
    if (p.splits == 1) {
      p.out[static_cast<int64_t>(head) * kHd + d] = out / sum;
    } else {
      const int64_t slot = static_cast<int64_t>(head) * p.splits + split;
      p.partial_out[slot * kHd + d] = out;
      if (d == 0) {
        p.partial_max_sum[slot * 2] = max_all;
        p.partial_max_sum[slot * 2 + 1] = sum;
      }
    }
  }
}

}  // namespace kuiper::op::cuda
