#include "kuiper/model/int4_gptq.h"

#include <armadillo>
#include <vector>

#include "kuiper/model/int4_code_refit.h"

namespace kuiper {
namespace {

// `inputs`' Gram matrix H, dampened.
arma::mat dampened_gram(const InputGram& inputs) {
  const int n = inputs.dim();
  arma::mat h(inputs.sums());
  h.reshape(n, n);  // symmetric: row- and column-major agree
  // A column no calibration input reached has no error to spread and receives none; a unit
  // diagonal keeps H invertible without coupling it to the others.
  for (int i = 0; i < n; ++i) {
    if (h(i, i) == 0) h(i, i) = 1;
  }
  h.diag() += kGptqDampening * arma::mean(h.diag());
  return h;
}

// The upper triangular U with H⁻¹ = Uᵀ U.
StatusOr<arma::mat> inverse_cholesky(const arma::mat& h) {
  arma::mat inverse, upper;
  if (!arma::inv_sympd(inverse, h) || !arma::chol(upper, inverse, "upper")) {
    return invalid_argument("the calibration inputs' Gram matrix (" + std::to_string(h.n_rows) + " × " +
                            std::to_string(h.n_rows) + ") is not positive definite even after dampening");
  }
  return upper;
}

}  // namespace

StatusOr<op::Weight> quantize_int4_gptq(const Tensor& values, const InputGram& inputs, int group_size,
                                        Int4Scheme scheme) {
  KUIPER_ASSIGN_OR_RETURN(Tensor source, int4_quantization_source(values, group_size));
  // The columns are updated in place: a copy, since the source may be a view of the caller's
  // tensor or of a mapped file.
  KUIPER_ASSIGN_OR_RETURN(Tensor w, source.to(cpu_allocator()));
  const int64_t rows = w.dim(0), cols = w.dim(1);
  if (inputs.dim() != cols || inputs.rows() == 0) {
    return invalid_argument("GPTQ of " + values.describe() + " needs calibration inputs of width " + std::to_string(cols) +
                            ", got " + std::to_string(inputs.rows()) + " rows of width " + std::to_string(inputs.dim()));
  }
  const arma::mat h = dampened_gram(inputs);
  KUIPER_ASSIGN_OR_RETURN(arma::mat u, inverse_cholesky(h));
  const bool with_min = scheme == Int4Scheme::kWithMin;
  float* v = w.data<float>();
  std::vector<Int4GroupCode> codes(w.numel() / group_size);
  std::vector<bool> coded(codes.size(), false);
  std::vector<double> error(rows), u_row(cols);
  for (int64_t j = 0; j < cols; ++j) {
    // Codes of the groups reached here, from their members' current values (sequential: two rows
    // may reach one group at the same column).
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = (r * cols + j) / group_size;
      if (!coded[g]) {
        codes[g] = search_int4_code(v + g * group_size, group_size, with_min);
        coded[g] = true;
      }
    }
    const double pivot = u(j, j);
    for (int64_t r = 0; r < rows; ++r) {
      const Int4GroupCode& code = codes[(r * cols + j) / group_size];
      const float q = op::int4_value(static_cast<int>(int4_nibble_of(v[r * cols + j], code, with_min)), code.scale,
                                     code.min, with_min);
      error[r] = (v[r * cols + j] - q) / pivot;
    }
    // Spread each row's error over its later columns; column j itself keeps the value it was
    // quantized from, so the final values still give every weight's nibble.
    for (int64_t k = j + 1; k < cols; ++k) u_row[k] = u(j, k);
#pragma omp parallel for schedule(static) if (rows * (cols - j) > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      float* row = v + r * cols;
      for (int64_t k = j + 1; k < cols; ++k) row[k] -= static_cast<float>(error[r] * u_row[k]);
    }
  }
  refit_int4_codes(std::span(source.data<float>(), source.numel()), std::span(v, w.numel()), codes, rows, cols,
                   group_size, with_min, std::span(h.memptr(), h.n_elem));
  return int4_weight_from_codes(w, codes, group_size, scheme);
}

}  // namespace kuiper
