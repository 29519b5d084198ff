// out[t, :] = table[tokens[t], :], widened to fp32. Token ids are read on the device; an id
// outside the table yields a zero row (the host cannot check ids without a synchronisation).
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_kernel(const int32_t* tokens, const T* table, int64_t vocab,
                                 int64_t dim, float* out) {
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  const bool valid = id >= 0 && id < vocab;
  const T* row = table + (valid ? id : 0) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    out[t * dim + i] = valid ? to_float(row[i]) : 0.f;
  }
}

}  // namespace

Status embedding(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(tokens, DataType::kINT32, "embedding tokens"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "embedding output"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(table.values, "embedding table"));
  if (table.values.ndim() != 2 || out.numel() != tokens.numel() * table.cols()) {
    return invalid_argument("embedding shapes do not fit: tokens " + tokens.describe() +
                            ", table " + table.values.describe() + ", output " + out.describe());
  }
  if (tokens.numel() == 0) return ok_status();
  return dispatch_float_type(table.dtype(), [&](auto zero) {
    using T = decltype(zero);
    embedding_kernel<T><<<static_cast<unsigned>(tokens.numel()), kThreads, 0,
                          as_cuda_stream(ctx.stream())>>>(tokens.data<int32_t>(), table.values.data<T>(),
                                                    table.rows(), table.cols(), out.data<float>());
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("embedding");
    return ok_status();
  });
}

}  // namespace kuiper::op::cuda
