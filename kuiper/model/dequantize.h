// Going back from any quantized weight (int8 or int4) to the fp32 values it stands for. Host-side.
#pragma once

#include "kuiper/op/weight.h"

namespace kuiper {

// The fp32 values a quantized weight (int8 or int4, host or device) stands for: host [rows, cols].
StatusOr<Tensor> dequantize_weight(const op::Weight& weight);

// Largest |original − dequantized| over all elements, for export reports.
StatusOr<double> max_quantization_error(const Tensor& original, const op::Weight& quantized);

// Largest |a − b| over two host fp32 tensors of the same shape.
StatusOr<double> max_abs_difference(const Tensor& a, const Tensor& b);

}  // namespace kuiper
