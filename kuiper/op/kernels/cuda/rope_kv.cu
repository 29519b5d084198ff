// rope_kv_store: the prefill form of the q/k/v GEMV's epilogue, over the stacked output of one
// GEMM (kernel_table.h), one thread per pair of rows; and the argument check both forms share.
#include <algorithm>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"
#include "kuiper/op/kernels/cuda/rope_kv.cuh"

namespace kuiper::op::cuda {
namespace {

// Block (x, y) takes kElementwiseThreads pairs of the rows of tokens y, y + gridDim.y, ...: the
// pair index needs no 64-bit division, which a flat index over tokens x pairs did and which cost
// prefill measurably (docs/performance.md, "Measurements behind other choices").
__global__ void rope_kv_store_kernel(const float* qkv, const RopeKvArgs a, float* q,
                                     int64_t tokens) {
  const int width = a.q_rows + 2 * a.kv_rows;
  const int row = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (row >= width) return;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    const float* in = qkv + t * width + row;
    const int pos = a.positions[t];
    rope_kv_pair(a, pos, a.slots != nullptr ? a.slots[t] : pos, row, in[0], in[1], q + t * a.q_rows);
  }
}

}  // namespace

Status rope_kv_args(const RopeKvTarget& t, int64_t rows, int64_t tokens, const Tensor& q_out,
                    RopeKvArgs& a) {
  if (!t.positions || !t.cos || !t.sin || !t.k_cache || !t.v_cache) {
    return invalid_argument("rope/kv store needs positions, cos, sin and both caches");
  }
  KUIPER_RETURN_IF_ERROR(expect_cuda(*t.positions, DataType::kINT32, "rope/kv positions"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*t.cos, DataType::kFP32, "rope cos table"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*t.sin, DataType::kFP32, "rope sin table"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(*t.k_cache, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*t.v_cache, t.k_cache->dtype(), "value cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(q_out, DataType::kFP32, "rope/kv q output"));
  const int64_t kv = (rows - t.q_rows) / 2;
  const bool heads_fit = t.head_dim > 0 && t.head_dim % 2 == 0 && t.q_rows > 0 &&
                         t.q_rows % t.head_dim == 0 && kv > 0 && kv % t.head_dim == 0 &&
                         t.q_rows + 2 * kv == rows;
  if (!heads_fit || t.positions->numel() != tokens || t.cos->ndim() != 2 ||
      t.cos->dim(1) != t.head_dim / 2 || t.sin->shape() != t.cos->shape() ||
      t.k_cache->ndim() != 2 || t.k_cache->dim(1) != kv ||
      t.v_cache->shape() != t.k_cache->shape() || q_out.numel() != tokens * t.q_rows) {
    return invalid_argument("rope/kv shapes do not fit: stacked rows " + std::to_string(rows) +
                            ", q rows " + std::to_string(t.q_rows) + ", head_dim " +
                            std::to_string(t.head_dim) + ", positions " + t.positions->describe() +
                            ", key cache " + t.k_cache->describe() + ", q out " + q_out.describe());
  }
  if (t.slots != nullptr) {
    KUIPER_RETURN_IF_ERROR(expect_cuda(*t.slots, DataType::kINT32, "rope/kv slots"));
    if (t.slots->numel() != tokens) {
      return invalid_argument("rope/kv slots " + t.slots->describe() + " for " + std::to_string(tokens) + " tokens");
    }
    a.slots = t.slots->data<int32_t>();
  }
  if (rows > INT32_MAX || t.k_cache->dim(0) > INT32_MAX || t.cos->dim(0) > INT32_MAX) {
    return unsupported("rope/kv: rows, cache or rope table beyond 2^31");
  }
  a.positions = t.positions->data<int32_t>();
  a.cos = t.cos->data<float>();
  a.sin = t.sin->data<float>();
  a.table_rows = static_cast<int>(t.cos->dim(0));
  a.head_dim = t.head_dim;
  a.q_rows = t.q_rows;
  a.kv_rows = static_cast<int>(kv);
  a.context = static_cast<int>(t.k_cache->dim(0));
  a.k_cache = t.k_cache->raw_data();
  a.v_cache = t.v_cache->raw_data();
  a.cache_dtype = t.k_cache->dtype();
  return ok_status();
}

Status rope_kv_store(const Tensor& qkv, const RopeKvTarget& target, Tensor& q, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(qkv, DataType::kFP32, "rope/kv stacked input"));
  if (target.positions == nullptr) return invalid_argument("rope/kv store needs positions");
  const int64_t tokens = target.positions->numel();
  if (tokens == 0 || qkv.numel() % tokens != 0) {
    return invalid_argument("rope/kv stacked input " + qkv.describe() + " does not hold " +
                            std::to_string(tokens) + " rows");
  }
  RopeKvArgs a;
  KUIPER_RETURN_IF_ERROR(rope_kv_args(target, qkv.numel() / tokens, tokens, q, a));
  const int64_t pairs = qkv.numel() / tokens / 2;
  const dim3 grid(static_cast<unsigned>((pairs + kElementwiseThreads - 1) / kElementwiseThreads),
                  static_cast<unsigned>(std::min<int64_t>(tokens, kMaxGridY)));
  rope_kv_store_kernel<<<grid, kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
      qkv.data<float>(), a, q.data<float>(), tokens);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("rope_kv_store");
  return ok_status();
}

}  // namespace kuiper::op::cuda
