// Paged attention (kernel_table.h, PagedAttentionKernel): rows of several sequences, each row
// reading its own sequence's positions through the block table. One block of kPagedWarps warps
// per (row, query head); each warp keeps a running softmax (maximum, sum, weighted values) in
// registers and the warps then merge their partial results. A row's result depends only on its
// own sequence, never on the other rows of the step.
//
// 16-bit caches with head_dim 64 or 128 (every LLaMA-family model) take the streaming kernel:
// like the one-sequence decode kernel (attention_decode_kernel.cuh) a warp loads
// kPagedChunk positions' K and V rows before it uses the first, so a block's walk over
// the context costs one round trip per chunk rather than two per position. The walk one
// position at a time held batched decode to 67 ms per step for 8 or 16 sequences at context 4096
// on the LLaMA-2-7B shape (H100), the same time for both: latency, not bytes. Other caches take
// the one-position kernel.
#include <cmath>
#include <type_traits>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/head_slice.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kPagedWarps = 4;
// Positions whose K and V rows a warp of the streaming kernel has in flight (as the decode
// kernel's kDecodeAttentionChunk).
constexpr int kPagedChunk = 16;
constexpr int kPagedMaxHeadDim = 256;
constexpr int kPagedMaxPerLane = kPagedMaxHeadDim / 32;

struct PagedParams {
  const float* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* row_sequence = nullptr;
  float* out = nullptr;
  int table_width = 0, block_size = 0, blocks = 0;
  int n_heads = 0, group = 0, head_dim = 0;
  int64_t kv_dim = 0;
  float scale = 0.f;
};

// The cache slot of position j of a row's sequence, or -1 where the table names no block of the
// pool (a damaged table: the position is skipped, never read).
__device__ __forceinline__ int64_t paged_slot(const PagedParams& p, const int32_t* table, int64_t j) {
  const int block = table[j / p.block_size];
  if (block < 0 || block >= p.blocks) return -1;
  return int64_t{block} * p.block_size + j % p.block_size;
}

template <typename T>
__global__ void paged_attention_kernel(const PagedParams p) {
  const int head = blockIdx.x, row = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = (p.head_dim + 31) / 32;
  const int64_t q_dim = int64_t{p.n_heads} * p.head_dim;
  const float* q = p.q + row * q_dim + int64_t{head} * p.head_dim;
  float qv[kPagedMaxPerLane], acc[kPagedMaxPerLane];
  for (int i = 0; i < per_lane; ++i) {
    qv[i] = lane + 32 * i < p.head_dim ? q[lane + 32 * i] : 0.f;
    acc[i] = 0.f;
  }
  const int pos = p.positions[row];
  const int32_t* table = p.block_tables + int64_t{p.row_sequence[row]} * p.table_width;
  const int64_t kv_offset = int64_t{head / p.group} * p.head_dim;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  float max_score = -INFINITY, sum = 0.f;
  for (int j = warp; j <= pos; j += kPagedWarps) {
    const int64_t slot = paged_slot(p, table, j);
    if (slot < 0) continue;
    const T* k = k_cache + slot * p.kv_dim + kv_offset;
    float dot = 0.f;
    for (int i = 0; i < per_lane; ++i) {
      if (lane + 32 * i < p.head_dim) dot += qv[i] * to_float(k[lane + 32 * i]);
    }
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * p.scale;
    const float new_max = fmaxf(max_score, score);
    const float rescale = __expf(max_score - new_max), weight = __expf(score - new_max);
    const T* v = v_cache + slot * p.kv_dim + kv_offset;
    for (int i = 0; i < per_lane; ++i) {
      const float value = lane + 32 * i < p.head_dim ? to_float(v[lane + 32 * i]) : 0.f;
      acc[i] = acc[i] * rescale + weight * value;
    }
    sum = sum * rescale + weight;
    max_score = new_max;
  }
  // Merge the warps: each writes its maximum, sum and values; every thread then combines.
  __shared__ float warp_max[kPagedWarps], warp_sum[kPagedWarps];
  __shared__ float warp_acc[kPagedWarps][kPagedMaxHeadDim];
  if (lane == 0) {
    warp_max[warp] = max_score;
    warp_sum[warp] = sum;
  }
  for (int i = 0; i < per_lane; ++i) {
    if (lane + 32 * i < p.head_dim) warp_acc[warp][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  float total_max = -INFINITY;
  for (int w = 0; w < kPagedWarps; ++w) total_max = fmaxf(total_max, warp_max[w]);
  float total_sum = 0.f;
  for (int w = 0; w < kPagedWarps; ++w) {
    if (warp_sum[w] > 0.f) total_sum += warp_sum[w] * __expf(warp_max[w] - total_max);
  }
  float* out = p.out + row * q_dim + int64_t{head} * p.head_dim;
  for (int e = threadIdx.x; e < p.head_dim; e += blockDim.x) {
    float value = 0.f;
    for (int w = 0; w < kPagedWarps; ++w) {
      if (warp_sum[w] > 0.f) value += warp_acc[w][e] * __expf(warp_max[w] - total_max);
    }
    out[e] = total_sum > 0.f ? value / total_sum : 0.f;
  }
}


// Lane l holds elements l * kDims ... l * kDims + kDims - 1 of the query, of each K and V row
// and of the output (HeadSlice's layout).
template <typename T, int kDims>
__global__ void __launch_bounds__(kPagedWarps * 32) paged_attention_streaming_kernel(const PagedParams p) {
  constexpr int kHd = 32 * kDims, kChunk = kPagedChunk;
  const int head = blockIdx.x, row = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q_dim = int64_t{p.n_heads} * kHd;
  const int64_t length = int64_t{p.positions[row]} + 1;
  const int32_t* table = p.block_tables + int64_t{p.row_sequence[row]} * p.table_width;
  const T* k_base = static_cast<const T*>(p.k_cache) + int64_t{head / p.group} * kHd;
  const T* v_base = static_cast<const T*>(p.v_cache) + int64_t{head / p.group} * kHd;

  float q[kDims], acc[kDims], m = -INFINITY, l = 0.f;
#pragma unroll
  for (int d = 0; d < kDims; ++d) {
    q[d] = p.q[row * q_dim + int64_t{head} * kHd + lane * kDims + d] * p.scale;
    acc[d] = 0.f;
  }
  for (int64_t first = int64_t{warp} * kChunk; first < length; first += kPagedWarps * kChunk) {
    HeadSlice<T, kDims> k[kChunk], v[kChunk];
    bool valid[kChunk];
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      const int64_t slot = first + r < length ? paged_slot(p, table, first + r) : -1;
      valid[r] = slot >= 0;
      const int64_t read = valid[r] ? slot : 0;  // an unused row re-reads slot 0, weight 0 below
      k[r].load(k_base + read * p.kv_dim, lane);
      v[r].load(v_base + read * p.kv_dim, lane);
    }
    float s[kChunk];
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      float kf[kDims];
      k[r].widen(kf);
      s[r] = 0.f;
#pragma unroll
      for (int d = 0; d < kDims; ++d) s[r] += q[d] * kf[d];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
      for (int r = 0; r < kChunk; ++r) s[r] += __shfl_xor_sync(0xffffffffu, s[r], offset);
    }
    float chunk_max = -INFINITY;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      if (!valid[r]) s[r] = -INFINITY;
      chunk_max = fmaxf(chunk_max, s[r]);
    }
    if (chunk_max == -INFINITY) continue;  // every position of the chunk skipped
    const float new_max = fmaxf(m, chunk_max);
    const float rescale = expf(m - new_max);  // 0 on the first chunk
    m = new_max;
    l *= rescale;
#pragma unroll
    for (int d = 0; d < kDims; ++d) acc[d] *= rescale;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      const float w = expf(s[r] - new_max);
      l += w;
      float vf[kDims];
      v[r].widen(vf);
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[d] += w * vf[d];
    }
  }

  // Merge the warps as the one-position kernel does; a warp that read nothing (m = -inf) adds
  // nothing, and a row with no readable position gets zeros.
  __shared__ float acc_s[kPagedWarps][kHd];
  __shared__ float m_s[kPagedWarps], l_s[kPagedWarps];
#pragma unroll
  for (int d = 0; d < kDims; ++d) acc_s[warp][lane * kDims + d] = acc[d];
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
  __syncthreads();
  float max_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kPagedWarps; ++w) max_all = fmaxf(max_all, m_s[w]);
  float* out = p.out + row * q_dim + int64_t{head} * kHd;
  for (int e = threadIdx.x; e < kHd; e += blockDim.x) {
    float value = 0.f, sum = 0.f;
#pragma unroll
    for (int w = 0; w < kPagedWarps; ++w) {
      const float scale = m_s[w] == -INFINITY ? 0.f : expf(m_s[w] - max_all);
      value += acc_s[w][e] * scale;
      sum += l_s[w] * scale;
    }
    out[e] = sum > 0.f ? value / sum : 0.f;
  }
}

template <typename T>
void launch_paged_attention(const PagedParams& p, dim3 grid, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (p.head_dim == 128) {
      paged_attention_streaming_kernel<T, 4><<<grid, kPagedWarps * 32, 0, stream>>>(p);
      return;
    }
    if (p.head_dim == 64) {
      paged_attention_streaming_kernel<T, 2><<<grid, kPagedWarps * 32, 0, stream>>>(p);
      return;
    }
  }
  paged_attention_kernel<T><<<grid, kPagedWarps * 32, 0, stream>>>(p);
}

}  // namespace

Status paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                       const PagedKv& paged, const AttentionShape& shape, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(q, DataType::kFP32, "attention q"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(k_cache, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(v_cache, k_cache.dtype(), "value cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(positions, DataType::kINT32, "attention positions"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "attention output"));
  KUIPER_RETURN_IF_ERROR(check_attention_shapes(q, k_cache, v_cache, positions, shape, out));
  KUIPER_RETURN_IF_ERROR(check_paged_shapes(paged, positions, k_cache.dim(0)));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*paged.block_tables, DataType::kINT32, "block tables"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*paged.row_sequence, DataType::kINT32, "row sequences"));
  const int64_t tokens = positions.numel();
  if (shape.head_dim > kPagedMaxHeadDim || tokens > kMaxGridY) {
    return unsupported("cuda paged attention needs head_dim up to " +
                       std::to_string(kPagedMaxHeadDim) + " and at most " + std::to_string(kMaxGridY) +
                       " rows, got head_dim " + std::to_string(shape.head_dim) + " and " +
                       std::to_string(tokens) + " rows");
  }
  if (tokens == 0) return ok_status();
  PagedParams p;
  p.q = q.data<float>();
  p.k_cache = k_cache.raw_data();
  p.v_cache = v_cache.raw_data();
  p.positions = positions.data<int32_t>();
  p.block_tables = paged.block_tables->data<int32_t>();
  p.row_sequence = paged.row_sequence->data<int32_t>();
  p.out = out.data<float>();
  p.table_width = static_cast<int>(paged.block_tables->dim(1));
  p.block_size = paged.block_size;
  p.blocks = static_cast<int>(k_cache.dim(0) / paged.block_size);
  p.n_heads = shape.n_heads;
  p.group = shape.n_heads / shape.n_kv_heads;
  p.head_dim = shape.head_dim;
  p.kv_dim = k_cache.dim(-1);
  p.scale = 1.f / std::sqrt(static_cast<float>(shape.head_dim));
  const dim3 grid(static_cast<unsigned>(shape.n_heads), static_cast<unsigned>(tokens));
  const cudaStream_t stream = as_cuda_stream(ctx.stream());
  return dispatch_float_type(k_cache.dtype(), [&](auto zero) -> Status {
    launch_paged_attention<decltype(zero)>(p, grid, stream);
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("paged attention");
    return ok_status();
  });
}

}  // namespace kuiper::op::cuda
