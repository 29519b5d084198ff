#include "kuiper/model/input_gram.h"

#include <armadillo>

namespace kuiper {

Status InputGram::add(const Tensor& rows) {
  if (rows.dtype() != DataType::kFP32 || rows.device() != DeviceType::kCPU || rows.ndim() != 2 ||
      rows.dim(1) != dim_) {
    return invalid_argument("input Gram matrix of width " + std::to_string(dim_) + " takes host fp32 rows [n, " +
                            std::to_string(dim_) + "], got " + rows.describe());
  }
  // Row-major [n, dim] is column-major [dim, n]: Σ xᵀx over rows is X Xᵀ of that view.
  const arma::fmat x(const_cast<float*>(rows.data<float>()), dim_, rows.dim(0), /*copy_aux_mem=*/false, true);
  arma::mat sums(sums_.data(), dim_, dim_, false, true);
  const arma::mat wide = arma::conv_to<arma::mat>::from(x);
  sums += wide * wide.t();
  rows_ += rows.dim(0);
  return ok_status();
}

}  // namespace kuiper
