// A matrix a layer multiplies by: fp32/fp16/bf16 values, or quantized values with one scale per
// group of `group_size` consecutive weights along the input dimension (fp32 on the CPU, fp16 on
// CUDA: weight_groups.h): int8 (symmetric,
// op/int8_weight.h) or int4 (two weights a byte, symmetric or with a per-group minimum,
// op/int4_weight.h). The same struct carries every dtype, so layers never care which one they hold.
#pragma once

#include <cstdint>
#include <string>

#include "kuiper/tensor/tensor.h"

namespace kuiper::op {

struct Weight {
  Tensor values;       // [rows, cols]; int4: [rows, cols / 2] bytes of two weights
  Tensor scales;       // int8/int4 only: [rows * cols / group_size]; empty otherwise
  int group_size = 0;  // int8/int4 only
  Tensor mins{};       // int4 with a per-group minimum only: one per group; empty otherwise

  DataType dtype() const { return values.dtype(); }
  DeviceType device() const { return values.device(); }
  int64_t rows() const { return values.dim(0); }
  int64_t cols() const { return values.dim(1) * (values.dtype() == DataType::kINT4 ? 2 : 1); }
  // Weights it stands for (rows · cols), whatever the bytes per weight.
  int64_t numel() const { return rows() * cols(); }
  bool is_quantized() const { return dtype() == DataType::kINT8 || dtype() == DataType::kINT4; }
  size_t nbytes() const {
    return values.nbytes() + (scales.is_empty() ? 0 : scales.nbytes()) + (mins.is_empty() ? 0 : mins.nbytes());
  }

  // Rows [begin, end) as a weight sharing this one's memory. Groups run over the flattened
  // matrix and may straddle rows, so the rows must begin and end on group boundaries.
  StatusOr<Weight> slice_rows(int64_t begin, int64_t end) const {
    Weight part{Tensor(), Tensor(), group_size, Tensor()};
    KUIPER_ASSIGN_OR_RETURN(part.values, values.slice(begin, end));
    if (group_size <= 0) return part;
    const int64_t first = begin * cols(), last = end * cols();
    if (first % group_size != 0 || last % group_size != 0) {
      return unsupported("rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a " +
                         std::to_string(cols()) + "-column weight in groups of " + std::to_string(group_size) +
                         " do not begin and end on group boundaries");
    }
    if (!scales.is_empty()) {
      KUIPER_ASSIGN_OR_RETURN(part.scales, scales.slice(first / group_size, last / group_size));
    }
    if (!mins.is_empty()) {
      KUIPER_ASSIGN_OR_RETURN(part.mins, mins.slice(first / group_size, last / group_size));
    }
    return part;
  }

  // Columns [begin, end) as a new host weight in `alloc` (a copy: columns are not contiguous).
  // Quantized weights must have whole groups in each row, and the columns must begin and end
  // on group boundaries, so that each group keeps its scale.
  StatusOr<Weight> slice_cols(int64_t begin, int64_t end, Allocator& alloc) const;
};

}  // namespace kuiper::op
