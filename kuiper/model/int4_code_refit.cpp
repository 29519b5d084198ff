#include "kuiper/model/int4_code_refit.h"

#include <armadillo>

#include "kuiper/op/int4_weight.h"

namespace kuiper {
namespace {

// The output error e H eᵀ of one row, e = original − reconstruction.
double output_error(const arma::vec& original, const arma::vec& reconstruction, const arma::mat& h) {
  const arma::vec e = original - reconstruction;
  return arma::dot(e, h * e);
}

}  // namespace

void refit_int4_codes(std::span<const float> original, std::span<float> quantized, std::vector<Int4GroupCode>& codes,
                      int64_t rows, int64_t cols, int group_size, bool with_min, std::span<const double> h_values) {
  const arma::mat h(const_cast<double*>(h_values.data()), cols, cols, /*copy_aux_mem=*/false, true);
  const int per_group = with_min ? 2 : 1;  // unknowns a group: scale (and minimum)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row_start = r * cols;
    // The groups wholly inside this row.
    const int64_t first_group = (row_start + group_size - 1) / group_size;
    const int64_t end_group = (row_start + cols) / group_size;
    if (end_group <= first_group) continue;
    const int64_t groups = end_group - first_group;
    arma::vec w(cols), current(cols), nibble(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = row_start + c;
      const Int4GroupCode& code = codes[i / group_size];
      const int q = static_cast<int>(int4_nibble_of(quantized[i], code, with_min));
      w(c) = original[i];
      current(c) = op::int4_value(q, code.scale, code.min, with_min);
      nibble(c) = with_min ? q : q - op::kInt4SymmetricZero;
    }
    // The least-squares problem in the refit groups' codes: A θ is their part of the row, the
    // spanning groups' part stays fixed. A's columns are group-local, so H A and Aᵀ H A are
    // assembled group by group.
    const int64_t unknowns = groups * per_group;
    arma::mat a(cols, unknowns, arma::fill::zeros);
    arma::vec target = w;  // w minus the fixed groups' part
    arma::uvec refit(cols, arma::fill::zeros);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = (first_group + g) * group_size - row_start;
      for (int64_t c = begin; c < begin + group_size; ++c) {
        a(c, g * per_group) = nibble(c);
        if (with_min) a(c, g * per_group + 1) = 1.0;
        refit(c) = 1;
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (!refit(c)) target(c) -= current(c);
    }
    arma::mat ha(cols, unknowns), normal(unknowns, unknowns);
    for (int64_t g = 0; g < groups; ++g) {
      const arma::uword begin = (first_group + g) * group_size - row_start, end = begin + group_size - 1;
      ha.col(g * per_group) = h.cols(begin, end) * nibble.subvec(begin, end);
      if (with_min) ha.col(g * per_group + 1) = arma::sum(h.cols(begin, end), 1);
    }
    for (int64_t g = 0; g < groups; ++g) {
      const arma::uword begin = (first_group + g) * group_size - row_start, end = begin + group_size - 1;
      for (int k = 0; k < per_group; ++k) {
        normal.row(g * per_group + k) = a.col(g * per_group + k).subvec(begin, end).t() * ha.rows(begin, end);
      }
    }
    arma::vec theta;
    if (!arma::solve(theta, normal, ha.t() * target, arma::solve_opts::no_approx)) continue;
    bool positive = true;
    for (int64_t g = 0; g < groups; ++g) positive = positive && theta(g * per_group) > 0;
    if (!positive) continue;
    arma::vec candidate = current;
    for (int64_t c = 0; c < cols; ++c) {
      if (refit(c)) candidate(c) = arma::dot(a.row(c), theta);
    }
    if (output_error(w, candidate, h) >= output_error(w, current, h)) continue;
    for (int64_t g = 0; g < groups; ++g) {
      Int4GroupCode& code = codes[first_group + g];
      code.scale = static_cast<float>(theta(g * per_group));
      code.min = with_min ? static_cast<float>(theta(g * per_group + 1)) : 0.f;
      const int64_t begin = (first_group + g) * group_size;
      for (int64_t i = begin; i < begin + group_size; ++i) {
        const int q = static_cast<int>(nibble(i - row_start)) + (with_min ? 0 : op::kInt4SymmetricZero);
        quantized[i] = op::int4_value(q, code.scale, code.min, with_min);
      }
    }
  }
}

}  // namespace kuiper
