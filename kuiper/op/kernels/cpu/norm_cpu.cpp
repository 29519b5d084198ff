#include <cmath>

#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper::op::cpu {

Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, Stream) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(in, DataType::kFP32, "rmsnorm input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight, DataType::kFP32, "rmsnorm weight"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "rmsnorm output"));
  const int64_t dim = weight.numel();
  if (in.numel() % dim != 0 || out.numel() != in.numel()) {
    return invalid_argument("rmsnorm shapes do not fit: input " + in.describe() + ", weight " +
                            weight.describe() + ", output " + out.describe());
  }
  const float* w = weight.data<float>();
  for (int64_t row = 0; row < in.numel() / dim; ++row) {
    const float* x = in.data<float>() + row * dim;
    float* y = out.data<float>() + row * dim;
    float sum_sq = 0.f;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < dim; ++i) sum_sq += x[i] * x[i];
    const float scale = 1.f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * scale * w[i];
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
