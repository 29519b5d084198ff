// out[t, :] = dequant(table[tokens[t], :]). Token ids are read on the device; an id outside the
// table yields a zero row, as for the float tables (embedding_cuda.cu).
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/int8_cuda_kernels.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_int8_kernel(const int32_t* tokens, const int8_t* q, const float* scales,
                                      int64_t vocab, int64_t dim, int group_size, float* out) {
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  const bool valid = id >= 0 && id < vocab;
  const int64_t start = (valid ? id : 0) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    out[t * dim + i] = valid ? static_cast<float>(q[start + i]) * scales[(start + i) / group_size] : 0.f;
  }
}

}  // namespace

Status embedding_int8(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(table));
  KUIPER_RETURN_IF_ERROR(expect_cuda(table.values, DataType::kINT8, "embedding table"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(tokens, DataType::kINT32, "embedding tokens"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "embedding output"));
  if (out.numel() != tokens.numel() * table.cols()) {
    return invalid_argument("embedding shapes do not fit: tokens " + tokens.describe() +
                            ", table " + table.values.describe() + ", output " + out.describe());
  }
  if (tokens.numel() == 0) return ok_status();
  embedding_int8_kernel<<<static_cast<unsigned>(tokens.numel()), kThreads, 0, as_cuda_stream(ctx.stream())>>>(
      tokens.data<int32_t>(), table.values.data<int8_t>(), table.scales.data<float>(), table.rows(),
      table.cols(), table.group_size, out.data<float>());
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("embedding_int8");
  return ok_status();
}

}  // namespace kuiper::op::cuda
