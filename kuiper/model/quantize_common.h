// What every weight quantizer shares (int8_quantize.h, int4_quantize.h): the fp32 source it reads
// and the host copy it dequantizes from. Host-side.
#pragma once

#include "kuiper/op/weight.h"

namespace kuiper {

// A host fp32 copy (or view) of a 2-d float tensor about to be quantized in groups of
// `group_size`; refuses a shape that is not a whole number of groups and any NaN or infinite
// weight (naming its row and column), which no scale could represent.
StatusOr<Tensor> quantization_source(const Tensor& values, int group_size);

// `weight` with its tensors on the host (itself when it is there already).
StatusOr<op::Weight> weight_on_host(const op::Weight& weight);

}  // namespace kuiper
