// Weight-only symmetric int8 quantization (see op/int8_weight.h for the layout): per group,
// scale = max|w| / 127 and q = round(w / scale) in [-127, 127], so that every weight comes back
// within scale / 2. Host-side; used by the export tool and at model load.
#pragma once

#include "kuiper/op/int8_weight.h"

namespace kuiper {

inline constexpr int kDefaultInt8GroupSize = 64;

// Quantizes a 2-d fp32/fp16/bf16 tensor; refuses when its element count is not a multiple
// of `group_size` or when it holds a NaN or ±Inf.
StatusOr<op::Weight> quantize_int8(const Tensor& values, int group_size);

// The fp32 values an int8 weight stands for (host tensor [rows, cols]).
StatusOr<Tensor> dequantize_int8(const op::Weight& weight);

}  // namespace kuiper
