// Paged attention (kernel_table.h, PagedAttentionKernel): rows of several sequences, each row
// reading its own sequence's positions through the block table. One block of kPagedWarps warps
// per (row, query head); warp w takes positions w, w + kPagedWarps, ... and keeps a running
// softmax (maximum, sum, weighted values) in registers, lane l holding elements l, l + 32, ...
// of the query and output; the warps then merge their partial results. A row's result
// depends only on its own sequence, never on the other rows of the step.
#include <cmath>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kPagedWarps = 4;
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
    const int block = table[j / p.block_size];
    if (block < 0 || block >= p.blocks) continue;  // a damaged table: skip, never read outside
    const int64_t slot = int64_t{block} * p.block_size + j % p.block_size;
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
    paged_attention_kernel<decltype(zero)><<<grid, kPagedWarps * 32, 0, stream>>>(p);
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("paged attention");
    return ok_status();
  });
}

}  // namespace kuiper::op::cuda
