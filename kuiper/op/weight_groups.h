// The grouping every quantized weight type shares (int8_weight.h, int4_weight.h): groups are runs
// of `group_size` consecutive weights in row-major order, scale g covering flat elements
// [g * group_size, (g + 1) * group_size). When cols is a multiple of group_size (the usual
// case) every group lies inside one row; otherwise a group runs on into the next row, exactly
// as llama2.c's and KuiperLLama's exporters group a flattened matrix.
//
// A group's constants (its scale, and an int4 group's minimum) are stored in the dtype the
// device's kernels read them in, group_constants_dtype: fp32 on the CPU, fp16 on CUDA, where a
// decode GEMV streams them with the weights and fp32 made a symmetric int4 weight 5 bits instead
// of 4.5 (fp16 is also what GGUF's Q4_0, Q4_1 and Q8_0 blocks store). Host code (quantizers,
// loaders, writers) works in fp32; model/quantize_common.h moves weights between the two.
#pragma once

#include <cstdint>
#include <string>

#include "kuiper/op/weight.h"

namespace kuiper::op {

// The dtype of the group constants of quantized weights on `device`.
inline DataType group_constants_dtype(DeviceType device) {
  return device == DeviceType::kCUDA ? DataType::kFP16 : DataType::kFP32;
}

// Index of the group of flat element `index`.
inline int64_t weight_group_of(int64_t index, int group_size) { return index / group_size; }

// OK when `weight` (of `kind`, for messages) has a positive group size dividing its weights and
// one entry per group in `per_group` (its scales or mins) on the values' device, in that
// device's group_constants_dtype.
Status check_group_tensor(const Weight& weight, const Tensor& per_group, const std::string& kind,
                          const char* what);

}  // namespace kuiper::op
