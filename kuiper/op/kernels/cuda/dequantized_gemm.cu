#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"

namespace kuiper::op::cuda {

StatusOr<int64_t> quantized_matmul_tokens(const Tensor& in, const Weight& weight, const Tensor& out, DataType dtype) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(weight.values, dtype, "matmul weight"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(in, DataType::kFP32, "matmul input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "matmul output"));
  const int64_t rows = weight.rows(), cols = weight.cols();
  if (cols == 0 || in.numel() % cols != 0 || out.numel() != in.numel() / cols * rows) {
    return invalid_argument("matmul shapes do not fit: input " + in.describe() + ", weight " +
                            weight.values.describe() + ", output " + out.describe());
  }
  if (rows > INT32_MAX || cols > INT32_MAX) {
    return unsupported("matmul dimensions beyond 2^31: weight " + weight.values.describe());
  }
  return rows == 0 ? 0 : in.numel() / cols;
}

}  // namespace kuiper::op::cuda
