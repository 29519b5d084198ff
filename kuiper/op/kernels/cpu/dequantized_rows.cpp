#include "kuiper/op/kernels/cpu/dequantized_rows.h"

#include <armadillo>

#include <algorithm>
#include <vector>

#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper::op::cpu {
namespace {

// Rows per prefill panel: large enough for GEMM to run at speed, small enough (≤ 2 MiB of
// fp32 for cols ≤ 2048) to stay in cache between dequantizing and multiplying.
constexpr int64_t kPanelRows = 256;

// out[tokens, rows] = in[tokens, cols] · dequant(W)ᵀ. Each thread takes a block of rows (BLAS
// itself is single-threaded, see cpu_threads.h) and walks it a panel at a time: dequantize
// into its own buffer, then GEMM.
void gemm_dequantized(const Weight& w, const float* in, float* out, int64_t tokens, DequantizeRows dequantize) {
  const int64_t rows = w.rows(), cols = w.cols();
  // Column-major views: x is [cols, tokens], y is [rows, tokens].
  const arma::fmat x(const_cast<float*>(in), cols, tokens, /*copy_aux_mem=*/false, true);
  arma::fmat y(out, rows, tokens, false, true);
  parallel_blocks(rows, rows * cols * tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> panel(static_cast<size_t>(std::min(kPanelRows, end - begin) * cols));
    for (int64_t first = begin; first < end; first += kPanelRows) {
      const int64_t count = std::min(kPanelRows, end - first);
      dequantize(w, first, count, panel.data());
      const arma::fmat wp(panel.data(), cols, count, false, true);  // [cols, count]
      y.rows(first, first + count - 1) = wp.t() * x;
    }
  });
}

// Checks a quantized matmul's fp32 input and output against the weight's shape.
Status check_matmul_shapes(const Tensor& in, const Weight& weight, const Tensor& out) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(in, DataType::kFP32, "matmul input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "matmul output"));
  const int64_t rows = weight.rows(), cols = weight.cols();
  if (in.numel() % cols != 0 || out.numel() != in.numel() / cols * rows) {
    return invalid_argument("matmul shapes do not fit: input " + in.describe() + ", weight " +
                            weight.values.describe() + ", output " + out.describe());
  }
  return ok_status();
}

}  // namespace

Status embedding_dequantized(const Tensor& tokens, const Weight& table, Tensor& out, DequantizeRows dequantize) {
  KUIPER_RETURN_IF_ERROR(check_embedding(tokens, table, out));
  const int64_t dim = table.cols();
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t t = 0; t < tokens.numel(); ++t) dequantize(table, ids[t], 1, out.data<float>() + t * dim);
  return ok_status();
}

Status matmul_quantized(const Tensor& in, const Weight& w, Tensor& out, DequantizeRows dequantize, Gemv gemv,
                        CodedGemm gemm) {
  KUIPER_RETURN_IF_ERROR(check_matmul_shapes(in, w, out));
  const int64_t tokens = in.numel() / w.cols();
  if (tokens == 1) {
    gemv(w, in.data<float>(), out.data<float>());
  } else if (!gemm || !gemm(w, in.data<float>(), out.data<float>(), tokens)) {
    gemm_dequantized(w, in.data<float>(), out.data<float>(), tokens, dequantize);
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
