#include <cmath>

#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper::op::cpu {

namespace {

Status check_norm(const Tensor& in, const Tensor& weight, const Tensor& out) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(in, DataType::kFP32, "rmsnorm input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight, DataType::kFP32, "rmsnorm weight"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "rmsnorm output"));
  const int64_t dim = weight.numel();
  if (dim == 0 || in.numel() % dim != 0 || out.numel() != in.numel()) {
    return invalid_argument("rmsnorm shapes do not fit: input " + in.describe() + ", weight " +
                            weight.describe() + ", output " + out.describe());
  }
  return ok_status();
}

// Normalises each row of `in` into `out` (which may alias it).
void normalise_rows(const float* in, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = in + row * dim;
    float* y = out + row * dim;
    float sum_sq = 0.f;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < dim; ++i) sum_sq += x[i] * x[i];
    const float scale = 1.f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * scale * w[i];
  }
}

}  // namespace

Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_norm(in, weight, out));
  const int64_t dim = weight.numel();
  normalise_rows(in.data<float>(), weight.data<float>(), in.numel() / dim, dim, eps, out.data<float>());
  return ok_status();
}

Status add_rmsnorm(Tensor& x, const Tensor& delta, const Tensor& weight, float eps, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_norm(x, weight, out));
  KUIPER_RETURN_IF_ERROR(expect_cpu(delta, DataType::kFP32, "rmsnorm residual"));
  if (delta.numel() != x.numel()) {
    return invalid_argument("residual " + delta.describe() + " does not fit " + x.describe());
  }
  float* xs = x.data<float>();
  const float* d = delta.data<float>();
  const int64_t n = x.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) xs[i] += d[i];
  const int64_t dim = weight.numel();
  normalise_rows(xs, weight.data<float>(), n / dim, dim, eps, out.data<float>());
  return ok_status();
}

}  // namespace kuiper::op::cpu
