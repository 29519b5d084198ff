// Paged attention (kernel_table.h, PagedAttentionKernel): rows of several sequences, each row
// reading its own sequence's positions through the block table. One block of
// kDecodeAttentionWarps warps per (query heads of one KV head, range of positions, row); each
// warp keeps a running softmax (maximum, sum, weighted values) per query head in registers and
// the warps then merge their results. A row's result depends only on its own sequence, never on
// the other rows' data; their number and the block tables' width pick the ranges below, which
// can change its rounding.
//
// 16-bit caches with head_dim 64 or 128 (every LLaMA-family model) take the one-sequence decode
// kernel's chunk loop (attention_decode_kernel.cuh, decode_attention_block) with the block table
// as its row map, and, where the step has blocks to spare, up to kPagedGroupHeads query heads of
// a KV head to a block, so that the KV head's rows are read once for all of them
// (paged_attention_layout, kernel_shapes.h): a warp keeps two chunks of
// kDecodeAttentionChunk positions' K and V rows in flight, so its walk is not a round trip per
// position (a walk one position at a time is bound by latency, not bytes). Other caches take
// the one-position kernel.
//
// With few rows, rows × heads blocks leave most of the GPU idle while each walks a whole context
// (16 sequences then step as fast as 8), so each row's positions are split into ranges
// (kernel_shapes.h, paged_attention_splits) whose partial results attention_combine_kernel
// merges, as the one-sequence decode does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/attention_decode_kernel.cuh"
#include "kuiper/op/kernels/cuda/attention_kernels.cuh"
#include "kuiper/op/kernels/cuda/cuda_backend.cuh"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kPagedWarps = kDecodeAttentionWarps;
constexpr int kPagedMaxHeadDim = 256;
constexpr int kPagedMaxPerLane = kPagedMaxHeadDim / 32;

struct PagedParams {
  const float* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* row_sequence = nullptr;
  AttentionOutput out;
  float* partial_out = nullptr;      // when splits > 1 (DecodeOutput)
  float* partial_max_sum = nullptr;
  int table_width = 0, block_size = 0, blocks = 0;
  int n_heads = 0, group = 0, head_dim = 0;
  int heads_per_block = 1;  // query heads a block attends for, all of one KV head (BlockHeads)
  int64_t kv_dim = 0;
  int64_t reach = 0;  // positions a block table covers: a row's positions past it are not read
  int64_t span = 0;   // positions per range
  int splits = 1;
  float scale = 0.f;
};

// The cache slot of position j of a sequence, or -1 where its table names no block of the pool
// (a damaged table: the position is skipped, never read). Positions are int32 and paged_attention
// refuses pools of 2^31 slots or more, so both fit 32 bits (a 64-bit division is a long
// subroutine).
struct PagedRows {
  static constexpr bool kLookup = true;
  const int32_t* table;
  unsigned block_size;
  int blocks;
  __device__ int32_t operator()(int64_t j) const {
    const unsigned position = static_cast<unsigned>(j);
    const int block = table[position / block_size];
    if (block < 0 || block >= blocks) return -1;
    return static_cast<int32_t>(block * block_size + position % block_size);
  }
};

// The query heads of block blockIdx.x when each KV head's `group` query heads take blocks of
// `per_block` (the grid's x: KV heads × paged_blocks_per_kv_head): `count` of them from `first`
// (fewer than per_block in a group's last block where per_block does not divide it), all of KV
// head kv_head.
struct BlockHeads {
  int kv_head, first, count;
  __device__ BlockHeads(int group, int per_block) {
    const int blocks = paged_blocks_per_kv_head(group, per_block);
    kv_head = static_cast<int>(blockIdx.x) / blocks;
    first = kv_head * group + static_cast<int>(blockIdx.x) % blocks * per_block;
    count = min(per_block, (kv_head + 1) * group - first);
  }
};

// What block (query heads, range, row) of either kernel attends to and where it writes.
struct PagedBlock {
  BlockHeads heads;
  int row;
  int64_t begin, end;  // the range's positions
  PagedRows rows;
  DecodeOutput output;  // the first head's
  __device__ explicit PagedBlock(const PagedParams& p)
      : heads(p.group, p.heads_per_block), row(blockIdx.z), begin(int64_t{blockIdx.y} * p.span),
        end(min(begin + p.span, attended_length(p.positions, row, p.reach))),
        rows{p.block_tables + int64_t{p.row_sequence[row]} * p.table_width,
             static_cast<unsigned>(p.block_size), p.blocks},
        output{p.out, p.partial_out, p.partial_max_sum, int64_t{row} * p.n_heads + heads.first,
               static_cast<int>(blockIdx.y), p.splits} {}
  __device__ const float* q(const PagedParams& p) const { return p.q + output.head_row * p.head_dim; }
  __device__ int64_t kv_offset(const PagedParams& p) const { return int64_t{heads.kv_head} * p.head_dim; }
};

// Any head_dim up to kPagedMaxHeadDim and any cache type: one position at a time per warp, lane l
// holding elements l, l + 32, ... of the query and the output.
template <typename T>
__global__ void paged_attention_kernel(const PagedParams p) {
  const PagedBlock b(p);
  if (!decode_range_nonempty(b.begin, b.end, p.head_dim, 1, b.output)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = (p.head_dim + 31) / 32;
  const float* q = b.q(p);
  float qv[kPagedMaxPerLane], acc[kPagedMaxPerLane];
  for (int i = 0; i < per_lane; ++i) {
    qv[i] = lane + 32 * i < p.head_dim ? q[lane + 32 * i] : 0.f;
    acc[i] = 0.f;
  }
  const T* k_cache = static_cast<const T*>(p.k_cache) + b.kv_offset(p);
  const T* v_cache = static_cast<const T*>(p.v_cache) + b.kv_offset(p);
  float max_score = -INFINITY, sum = 0.f;
  for (int64_t j = b.begin + warp; j < b.end; j += kPagedWarps) {
    const int64_t slot = b.rows(j);
    if (slot < 0) continue;
    const T* k = k_cache + slot * p.kv_dim;
    float dot = 0.f;
    for (int i = 0; i < per_lane; ++i) {
      if (lane + 32 * i < p.head_dim) dot += qv[i] * to_float(k[lane + 32 * i]);
    }
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * p.scale;
    const float new_max = fmaxf(max_score, score);
    const float rescale = __expf(max_score - new_max), weight = __expf(score - new_max);
    const T* v = v_cache + slot * p.kv_dim;
    for (int i = 0; i < per_lane; ++i) {
      const float value = lane + 32 * i < p.head_dim ? to_float(v[lane + 32 * i]) : 0.f;
      acc[i] = acc[i] * rescale + weight * value;
    }
    sum = sum * rescale + weight;
    max_score = new_max;
  }
  __shared__ float acc_s[kPagedWarps][kPagedMaxHeadDim];
  __shared__ float m_s[kPagedWarps], l_s[kPagedWarps];
  if (lane == 0) {
    m_s[warp] = max_score;
    l_s[warp] = sum;
  }
  for (int i = 0; i < per_lane; ++i) {
    if (lane + 32 * i < p.head_dim) acc_s[warp][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  store_merged_warps<kPagedWarps>(&acc_s[0][0], kPagedMaxHeadDim, m_s, l_s, p.head_dim, b.output);
}

// 16-bit caches, head_dim 32 · kDims: the chunk loop of the one-sequence decode kernel, for
// kHeads (p.heads_per_block) query heads of a KV head.
template <typename T, int kDims, int kHeads>
__global__ void __launch_bounds__(kPagedWarps * 32) paged_attention_streaming_kernel(const PagedParams p) {
  const PagedBlock b(p);
  const T* k = static_cast<const T*>(p.k_cache) + b.kv_offset(p);
  const T* v = static_cast<const T*>(p.v_cache) + b.kv_offset(p);
  decode_attention_block<T, kDims, kHeads>(b.q(p), b.heads.count, p.scale, k, v, p.kv_dim, b.begin, b.end, b.rows,
                                           b.output);
}

// Whether a cache and head size take the streaming kernel: 16-bit rows of 64 or 128 values.
bool paged_streams(DataType cache, int head_dim) {
  return (cache == DataType::kFP16 || cache == DataType::kBF16) && (head_dim == 64 || head_dim == 128);
}

// The heads a block may take (paged_attention_layout): powers of two up to kPagedGroupHeads.
template <typename T, int kDims>
void launch_streaming(const PagedParams& p, dim3 grid, cudaStream_t stream) {
  static_assert(kPagedGroupHeads == 4, "a kernel for each power of two up to kPagedGroupHeads");
  if (p.heads_per_block == 4) {
    paged_attention_streaming_kernel<T, kDims, 4><<<grid, kPagedWarps * 32, 0, stream>>>(p);
  } else if (p.heads_per_block == 2) {
    paged_attention_streaming_kernel<T, kDims, 2><<<grid, kPagedWarps * 32, 0, stream>>>(p);
  } else {
    paged_attention_streaming_kernel<T, kDims, 1><<<grid, kPagedWarps * 32, 0, stream>>>(p);
  }
}

template <typename T>
void launch_paged_attention(const PagedParams& p, bool streams, dim3 grid, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (streams) {
      return p.head_dim == 128 ? launch_streaming<T, 4>(p, grid, stream) : launch_streaming<T, 2>(p, grid, stream);
    }
  }
  paged_attention_kernel<T><<<grid, kPagedWarps * 32, 0, stream>>>(p);
}

}  // namespace

Status paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                       const PagedKv& paged, const AttentionShape& shape, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda_attention(q, k_cache, v_cache, positions, shape, out));
  KUIPER_RETURN_IF_ERROR(check_paged_shapes(paged, positions, k_cache.dim(0)));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*paged.block_tables, DataType::kINT32, "block tables"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*paged.row_sequence, DataType::kINT32, "row sequences"));
  const int64_t tokens = positions.numel();
  if (shape.head_dim > kPagedMaxHeadDim || tokens > kMaxGridY || k_cache.dim(0) > INT32_MAX) {
    return unsupported("cuda paged attention needs head_dim up to " + std::to_string(kPagedMaxHeadDim) +
                       ", at most " + std::to_string(kMaxGridY) +
                       " rows and a pool of fewer than 2^31 slots, got head_dim " + std::to_string(shape.head_dim) +
                       ", " + std::to_string(tokens) + " rows and " + std::to_string(k_cache.dim(0)) + " slots");
  }
  if (tokens == 0) return ok_status();
  PagedParams p;
  p.q = q.data<float>();
  p.k_cache = k_cache.raw_data();
  p.v_cache = v_cache.raw_data();
  p.positions = positions.data<int32_t>();
  p.block_tables = paged.block_tables->data<int32_t>();
  p.row_sequence = paged.row_sequence->data<int32_t>();
  p.out = attention_output(out);
  p.table_width = static_cast<int>(paged.block_tables->dim(1));
  p.block_size = paged.block_size;
  p.blocks = static_cast<int>(k_cache.dim(0) / paged.block_size);
  p.n_heads = shape.n_heads;
  p.group = shape.group();
  p.head_dim = shape.head_dim;
  p.kv_dim = k_cache.dim(-1);
  p.scale = 1.f / std::sqrt(static_cast<float>(shape.head_dim));
  // Positions are int32, so no row reaches past 2^31 whatever the table's width.
  p.reach = std::min(paged.block_tables->dim(1) * paged.block_size, int64_t{INT32_MAX} + 1);
  const bool streams = paged_streams(k_cache.dtype(), shape.head_dim);
  const PagedLayout layout =
      paged_attention_layout(tokens, p.reach, shape, cuda_backend(ctx).multiprocessors, streams);
  p.heads_per_block = layout.heads_per_block;
  p.span = layout.ranges.span;
  p.splits = layout.ranges.splits;
  if (p.splits > 1) {
    KUIPER_ASSIGN_OR_RETURN(const AttentionPartials partials,
                            attention_partials(ctx, tokens * shape.n_heads * p.splits, shape.head_dim));
    p.partial_out = partials.out;
    p.partial_max_sum = partials.max_sum;
  }
  const dim3 grid(static_cast<unsigned>(paged_blocks_per_range(shape, p.heads_per_block)),
                  static_cast<unsigned>(p.splits), static_cast<unsigned>(tokens));
  const cudaStream_t stream = as_cuda_stream(ctx.stream());
  return dispatch_float_type(k_cache.dtype(), [&](auto zero) -> Status {
    launch_paged_attention<decltype(zero)>(p, streams, grid, stream);
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("paged attention");
    if (p.splits > 1) {
      attention_combine_kernel<<<dim3(shape.n_heads, static_cast<unsigned>(tokens)), kCombineThreads, 0,
                                 stream>>>(p.partial_out, p.partial_max_sum, p.positions, p.reach, shape.n_heads,
                                           shape.head_dim, static_cast<int>(p.span), p.splits, p.out);
      KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("paged attention combine");
    }
    return ok_status();
  });
}

}  // namespace kuiper::op::cuda
