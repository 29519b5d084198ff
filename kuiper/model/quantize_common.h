// What every weight quantizer shares (int8_quantize.h, int4_quantize.h): the fp32 source it reads.
// Host-side.
#pragma once

#include "kuiper/op/weight.h"

namespace kuiper {

// A host fp32 copy (or view) of a 2-d float tensor about to be quantized in groups of
// `group_size`; refuses a shape that is not a whole number of groups and any NaN or infinite
// weight (naming its row and column), which no scale could represent.
StatusOr<Tensor> quantization_source(const Tensor& values, int group_size);

}  // namespace kuiper
