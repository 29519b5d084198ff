// The Gram matrix XᵀX of the rows a weight matrix multiplies, summed over calibration text: all
// the calibration-based quantizer (int4_gptq.h) needs to know of its inputs, since a weight error
// E adds ‖X Eᵀ‖² = Σ_rows e (XᵀX) eᵀ to the squared output error. Host-side, in double precision.
#pragma once

#include <cstdint>
#include <vector>

#include "kuiper/tensor/tensor.h"

namespace kuiper {

class InputGram {
 public:
  explicit InputGram(int dim = 0) : dim_(dim), sums_(static_cast<size_t>(dim) * dim, 0.0) {}

  // Adds the rows of a host fp32 tensor [n, dim].
  Status add(const Tensor& rows);

  int dim() const { return dim_; }
  int64_t rows() const { return rows_; }
  // Σ xᵀx over the rows added, row-major dim × dim.
  const std::vector<double>& sums() const { return sums_; }

 private:
  int dim_;
  int64_t rows_ = 0;
  std::vector<double> sums_;
};

}  // namespace kuiper
