// The grouping every quantized weight type shares (int8_weight.h, int4_weight.h): groups are runs
// of `group_size` consecutive weights in row-major order, scale g covering flat elements
// [g * group_size, (g + 1) * group_size). When cols is a multiple of group_size (the usual
// case) every group lies inside one row; otherwise a group runs on into the next row, exactly
// as llama2.c's and KuiperLLama's exporters group a flattened matrix.
#pragma once

#include <cstdint>
#include <string>

#include "kuiper/op/weight.h"

namespace kuiper::op {

// Index of the group of flat element `index`.
inline int64_t weight_group_of(int64_t index, int group_size) { return index / group_size; }

// OK when `weight` (of `kind`, for messages) has a positive group size dividing its weights and
// one fp32 entry per group in `per_group` (its scales or mins) on the values' device.
Status check_group_tensor(const Weight& weight, const Tensor& per_group, const std::string& kind,
                          const char* what);

}  // namespace kuiper::op
