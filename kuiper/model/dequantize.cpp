#include "kuiper/model/dequantize.h"

#include <algorithm>
#include <cmath>

#include "kuiper/model/float_convert.h"
#include "kuiper/model/int4_quantize.h"
#include "kuiper/model/int8_quantize.h"

namespace kuiper {

StatusOr<Tensor> dequantize_weight(const op::Weight& weight) {
  if (weight.dtype() == DataType::kINT4) return dequantize_int4(weight);
  return dequantize_int8(weight);
}

StatusOr<double> max_quantization_error(const Tensor& original, const op::Weight& quantized) {
  KUIPER_ASSIGN_OR_RETURN(Tensor src, place_fp32(original, cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(Tensor back, dequantize_weight(quantized));
  return max_abs_difference(src, back);
}

StatusOr<double> max_abs_difference(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DataType::kFP32 || b.dtype() != DataType::kFP32) {
    return invalid_argument("cannot compare " + a.describe() + " with " + b.describe());
  }
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  const int64_t n = a.numel();
  double worst = 0;
#pragma omp parallel for schedule(static) reduction(max : worst) if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  return worst;
}

}  // namespace kuiper
