// Rotary position embedding on interleaved pairs, one thread per pair of q or k. Positions are
// read on the device; a row whose position lies outside the cos/sin tables is left unrotated.
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
namespace {

__global__ void rope_kernel(float* q, float* k, const int32_t* positions, const float* cos,
                            const float* sin, int64_t table_rows, int64_t tokens,
                            int64_t q_pairs, int64_t k_pairs, int half_dim) {
  const int64_t pairs_per_token = q_pairs + k_pairs;
  const int64_t total = tokens * pairs_per_token;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / pairs_per_token;
    int64_t pair = i % pairs_per_token;
    const int32_t pos = positions[t];
    if (pos < 0 || pos >= table_rows) continue;
    float* row = q + t * q_pairs * 2;
    if (pair >= q_pairs) {
      pair -= q_pairs;
      row = k + t * k_pairs * 2;
    }
    const int64_t freq = static_cast<int64_t>(pos) * half_dim + pair % half_dim;
    const float c = cos[freq], s = sin[freq];
    const float a = row[2 * pair], b = row[2 * pair + 1];
    row[2 * pair] = a * c - b * s;
    row[2 * pair + 1] = a * s + b * c;
  }
}

}  // namespace

Status rope(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos, const Tensor& sin,
            int head_dim, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(q, DataType::kFP32, "rope q"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(k, DataType::kFP32, "rope k"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(positions, DataType::kINT32, "rope positions"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(cos, DataType::kFP32, "rope cos table"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(sin, DataType::kFP32, "rope sin table"));
  KUIPER_RETURN_IF_ERROR(check_rope_shapes(q, k, positions, cos, sin, head_dim));
  const int64_t tokens = positions.numel();
  const int64_t q_pairs = q.dim(-1) / 2, k_pairs = k.dim(-1) / 2;
  const int64_t total = tokens * (q_pairs + k_pairs);
  if (total == 0) return ok_status();
  rope_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
      q.data<float>(), k.data<float>(), positions.data<int32_t>(), cos.data<float>(),
      sin.data<float>(), cos.dim(0), tokens, q_pairs, k_pairs, head_dim / 2);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("rope");
  return ok_status();
}

}  // namespace kuiper::op::cuda
