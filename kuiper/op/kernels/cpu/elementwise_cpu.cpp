#include <cmath>
#include <limits>
#include <span>

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

int32_t finite_argmax(std::span<const float> values) {
  // 16 independent lanes, which the compiler turns into vector compares and blends; a scalar
  // compare chain over a batch of 64 rows of 128k logits kept the GPU waiting for milliseconds.
  constexpr size_t kLanes = 16;
  const size_t n = values.size(), whole = n / kLanes * kLanes;
  float best[kLanes], poison[kLanes] = {};
  int32_t at[kLanes];
  for (size_t l = 0; l < kLanes; ++l) {
    best[l] = -std::numeric_limits<float>::infinity();
    at[l] = -1;
  }
  for (size_t i = 0; i < whole; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const float v = values[i + l];
      poison[l] += v - v;  // NaN from here on if v is Inf or NaN
      const bool better = v > best[l];
      best[l] = better ? v : best[l];
      at[l] = better ? static_cast<int32_t>(i + l) : at[l];
    }
  }
  float any_poison = 0;
  for (size_t l = 0; l < kLanes; ++l) any_poison += poison[l];
  for (size_t i = whole; i < n; ++i) any_poison += values[i] - values[i];
  if (std::isnan(any_poison)) return -1;
  // Each lane holds its first maximum; among equal maxima the smallest index wins.
  int32_t winner = -1;
  float top = 0;
  const auto consider = [&](float v, int32_t i) {
    if (winner < 0 || v > top || (v == top && i < winner)) {
      top = v;
      winner = i;
    }
  };
  for (size_t l = 0; l < kLanes; ++l) {
    if (at[l] >= 0) consider(best[l], at[l]);
  }
  for (size_t i = whole; i < n; ++i) consider(values[i], static_cast<int32_t>(i));
  return winner;
}

Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(logits, DataType::kFP32, "argmax input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kINT32, "argmax output"));
  const int64_t rows = out.numel();
  if (logits.numel() == 0 || rows == 0 || logits.numel() % rows != 0 ||
      logits.numel() / rows > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("argmax needs rows of logits, one output slot each, got " + logits.describe() + " -> " +
                            out.describe());
  }
  const size_t n = static_cast<size_t>(logits.numel() / rows);
  for (int64_t r = 0; r < rows; ++r) {
    out.data<int32_t>()[r] = finite_argmax(std::span<const float>(logits.data<float>() + r * n, n));
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
