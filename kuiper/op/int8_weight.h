// The int8 weight contract shared by quantizer, loaders and kernels. Groups are runs of
// `group_size` consecutive weights in row-major order: scale g covers flat elements
// [g * group_size, (g + 1) * group_size). When cols is a multiple of group_size (the usual
// case) every group lies inside one row; otherwise a group runs on into the next row, exactly
// as llama2.c's and KuiperLLama's exporters group a flattened matrix.
#pragma once

#include <cstdint>

#include "kuiper/op/weight.h"

namespace kuiper::op {

// OK when `weight` is int8 [rows, cols] with fp32 scales [rows * cols / group_size] on the same
// device and rows * cols divisible by group_size; otherwise says which part does not fit.
Status check_int8_weight(const Weight& weight);

// Index of the scale of flat element `index`.
inline int64_t int8_group_of(int64_t index, int group_size) { return index / group_size; }

}  // namespace kuiper::op
