// out[T, rows] = in[T, cols] · Wᵀ on the CPU.
// fp32 goes through Armadillo to OpenBLAS (GEMV for decode, GEMM for prefill). fp16/bf16
// weights are widened row by row inside the dot product, so a half-precision checkpoint
// stays half the size in memory.
#include <armadillo>

#include "kuiper/base/half.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper::op::cpu {
namespace {

Status check_matmul(const Tensor& in, const Weight& weight, const Tensor& out) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(in, DataType::kFP32, "matmul input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "matmul output"));
  if (weight.values.ndim() != 2 || weight.device() != DeviceType::kCPU) {
    return invalid_argument("matmul weight must be a 2-d cpu tensor, got " +
                            weight.values.describe());
  }
  const int64_t cols = weight.cols();
  if (in.numel() % cols != 0 || out.numel() != in.numel() / cols * weight.rows()) {
    return invalid_argument("matmul shapes do not fit: input " + in.describe() + ", weight " +
                            weight.values.describe() + ", output " + out.describe());
  }
  return ok_status();
}

template <float (*Widen)(uint16_t)>
void matmul_half_impl(const float* in, const uint16_t* w, float* out, int64_t tokens,
                      int64_t rows, int64_t cols) {
  // Parallel over output rows: each weight row is read once per call and reused for all tokens.
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* wr = w + r * cols;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* x = in + t * cols;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < cols; ++c) sum += Widen(wr[c]) * x[c];
      out[t * rows + r] = sum;
    }
  }
}

}  // namespace

Status matmul_fp32(const Tensor& in, const Weight& weight, Tensor& out, Stream) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight.values, DataType::kFP32, "matmul weight"));
  KUIPER_RETURN_IF_ERROR(check_matmul(in, weight, out));
  const arma::uword rows = weight.rows(), cols = weight.cols(), tokens = in.numel() / cols;
  // Row-major W[rows, cols] is column-major [cols, rows]; likewise for activations.
  const arma::fmat w(weight.values.data<float>(), cols, rows, /*copy_aux_mem=*/false, true);
  const arma::fmat x(in.data<float>(), cols, tokens, false, true);
  arma::fmat y(out.data<float>(), rows, tokens, false, true);
  if (tokens == 1) {
    const arma::fvec xv(in.data<float>(), cols, false, true);
    arma::fvec yv(out.data<float>(), rows, false, true);
    yv = w.t() * xv;
  } else {
    y = w.t() * x;
  }
  return ok_status();
}

Status matmul_half(const Tensor& in, const Weight& weight, Tensor& out, Stream) {
  KUIPER_RETURN_IF_ERROR(check_matmul(in, weight, out));
  const int64_t rows = weight.rows(), cols = weight.cols(), tokens = in.numel() / cols;
  const auto* w = weight.values.data<uint16_t>();
  if (weight.dtype() == DataType::kBF16) {
    matmul_half_impl<bf16_to_float>(in.data<float>(), w, out.data<float>(), tokens, rows, cols);
  } else if (weight.dtype() == DataType::kFP16) {
    matmul_half_impl<fp16_to_float>(in.data<float>(), w, out.data<float>(), tokens, rows, cols);
  } else {
    return invalid_argument("matmul_half called with " + weight.values.describe());
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
