// A matrix a layer multiplies by: fp32/fp16/bf16 values, or int8 values with one fp32 scale per
// group of `group_size` consecutive weights along the input dimension (symmetric, scale =
// max|w| / 127). The same struct carries every dtype, so layers never care which one they hold.
#pragma once

#include <cstdint>

#include "kuiper/tensor/tensor.h"

namespace kuiper::op {

struct Weight {
  Tensor values;       // [rows, cols]: rows = output features, cols = input features
  Tensor scales;       // int8 only: fp32 [rows * cols / group_size]; empty otherwise
  int group_size = 0;  // int8 only

  DataType dtype() const { return values.dtype(); }
  DeviceType device() const { return values.device(); }
  int64_t rows() const { return values.dim(0); }
  int64_t cols() const { return values.dim(1); }
  bool is_quantized() const { return values.dtype() == DataType::kINT8; }
  size_t nbytes() const { return values.nbytes() + (scales.is_empty() ? 0 : scales.nbytes()); }

  // Rows [begin, end) as a weight sharing this one's memory.
  StatusOr<Weight> slice_rows(int64_t begin, int64_t end) const {
    Weight part{Tensor(), Tensor(), group_size};
    KUIPER_ASSIGN_OR_RETURN(part.values, values.slice(begin, end));
    if (!scales.is_empty()) {
      const int64_t per_row = cols() / group_size;
      KUIPER_ASSIGN_OR_RETURN(part.scales, scales.slice(begin * per_row, end * per_row));
    }
    return part;
  }
};

}  // namespace kuiper::op
