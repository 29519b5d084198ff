#include <cmath>

#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/cpu_threads.h"

namespace kuiper::op::cpu {
namespace {

Status check_same(const Tensor& a, const Tensor& b, const Tensor& out, const char* what) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(a, DataType::kFP32, what));
  KUIPER_RETURN_IF_ERROR(expect_cpu(b, DataType::kFP32, what));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, what));
  if (a.numel() != b.numel() || a.numel() != out.numel()) {
    return invalid_argument(std::string(what) + " operands differ in size: " + a.describe() +
                            ", " + b.describe() + ", " + out.describe());
  }
  return ok_status();
}

}  // namespace

Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_same(gate, up, out, "swiglu"));
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* y = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  return ok_status();
}

Status add(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_same(a, b, out, "add"));
  const float* x = a.data<float>();
  const float* z = b.data<float>();
  float* y = out.data<float>();
  const int64_t n = out.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] + z[i];
  return ok_status();
}

Status add_bias(Tensor& x, const Tensor& bias, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(x, DataType::kFP32, "add_bias input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(bias, DataType::kFP32, "bias"));
  const int64_t n = bias.numel();
  if (n == 0 || x.numel() % n != 0) {
    return invalid_argument("bias " + bias.describe() + " does not fit rows of " + x.describe());
  }
  const float* b = bias.data<float>();
  float* y = x.data<float>();
  const int64_t rows = x.numel() / n;
#pragma omp parallel for schedule(static) if (worth_threads(x.numel()))
  for (int64_t t = 0; t < rows; ++t) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[i];
  }
  return ok_status();
}

Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(logits, DataType::kFP32, "argmax input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kINT32, "argmax output"));
  if (logits.numel() == 0 || out.numel() == 0) {
    return invalid_argument("argmax needs at least one logit and one output slot, got " +
                            logits.describe() + " -> " + out.describe());
  }
  const float* x = logits.data<float>();
  int64_t best = 0;
  bool finite = true;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    finite &= std::isfinite(x[i]);
    if (x[i] > x[best]) best = i;
  }
  out.data<int32_t>()[0] = finite ? static_cast<int32_t>(best) : -1;
  return ok_status();
}

}  // namespace kuiper::op::cpu
