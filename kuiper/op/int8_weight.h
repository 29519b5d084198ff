// The int8 weight contract shared by quantizer, loaders and kernels: one int8 per weight, one
// scale per group (grouping and the scales' dtype: weight_groups.h); a weight is q · scale.
#pragma once

#include <cstdint>

#include "kuiper/op/weight_groups.h"

namespace kuiper::op {

// OK when `weight` is int8 [rows, cols] with scales [rows * cols / group_size] on the same
// device, in its group_constants_dtype, and rows * cols divisible by group_size; otherwise says
// which part does not fit.
Status check_int8_weight(const Weight& weight);

// Index of the scale of flat element `index`.
inline int64_t int8_group_of(int64_t index, int group_size) { return weight_group_of(index, group_size); }

}  // namespace kuiper::op
