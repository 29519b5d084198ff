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
  if (src.shape() != back.shape()) {
    return invalid_argument("cannot compare " + original.describe() + " with " + quantized.values.describe());
  }
  double worst = 0;
  for (int64_t i = 0; i < src.numel(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(src.data<float>()[i]) - back.data<float>()[i]));
  }
  return worst;
}

}  // namespace kuiper
