// out[T, rows] = in[T, cols] · Wᵀ on the CPU.
// fp32 prefill goes through Armadillo to OpenBLAS GEMM, one block of weight rows per thread.
// fp32 decode (up to kGemvMaxTokens rows) uses our
// own GEMV: it threads only when the matrix is large enough to pay for it, which keeps tiny models
// free of thread wake-ups and large ones streaming weights from both cores. fp16/bf16
// weights are widened row by row inside the dot product, so a half-precision checkpoint
// stays half the size in memory.
#include <armadillo>

#include "kuiper/base/half.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/cpu_threads.h"

namespace kuiper::op::cpu {
namespace {

// Up to this many tokens (a decode step of several sequences) the GEMV below, which gives each
// token the result it would get alone; beyond, a BLAS GEMM (prompt chunks), whose blocking
// pays once the tokens outnumber the registers.
constexpr int64_t kGemvMaxTokens = 32;

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
#pragma omp parallel for schedule(static) if (worth_threads(rows * cols * tokens))
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

// y[t, rows] = W[rows, cols] · x[t] for a few tokens t, four weight rows at a time so that each
// load of x feeds four independent accumulators. Each block of four rows is read from memory
// once and then stays in cache while every token uses it: decode of B sequences costs about
// one pass over the weights, not B. Each (row, token) sum is computed exactly as for one token
// alone, so a sequence's result does not depend on how many others share the step.
void gemv_fp32(const float* w, const float* x, float* y, int64_t rows, int64_t cols, int64_t tokens) {
  const int64_t blocks = rows / 4;
#pragma omp parallel for schedule(static) if (worth_threads(rows * cols * tokens))
  for (int64_t b = 0; b < blocks; ++b) {
    const float* w0 = w + 4 * b * cols;
    const float* w1 = w0 + cols;
    const float* w2 = w1 + cols;
    const float* w3 = w2 + cols;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* xt = x + t * cols;
      float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t c = 0; c < cols; ++c) {
        s0 += w0[c] * xt[c];
        s1 += w1[c] * xt[c];
        s2 += w2[c] * xt[c];
        s3 += w3[c] * xt[c];
      }
      float* yt = y + t * rows + 4 * b;
      yt[0] = s0;
      yt[1] = s1;
      yt[2] = s2;
      yt[3] = s3;
    }
  }
  for (int64_t r = 4 * blocks; r < rows; ++r) {
    for (int64_t t = 0; t < tokens; ++t) {
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < cols; ++c) s += w[r * cols + c] * x[t * cols + c];
      y[t * rows + r] = s;
    }
  }
}

}  // namespace

Status matmul_fp32(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight.values, DataType::kFP32, "matmul weight"));
  KUIPER_RETURN_IF_ERROR(check_matmul(in, weight, out));
  const arma::uword rows = weight.rows(), cols = weight.cols(), tokens = in.numel() / cols;
  if (tokens <= kGemvMaxTokens) {
    gemv_fp32(weight.values.data<float>(), in.data<float>(), out.data<float>(), rows, cols, tokens);
  } else {
    // Row-major W[rows, cols] is column-major [cols, rows]; likewise for activations.
    const arma::fmat x(in.data<float>(), cols, tokens, /*copy_aux_mem=*/false, true);
    arma::fmat y(out.data<float>(), rows, tokens, false, true);
    const float* w = weight.values.data<float>();
    parallel_blocks(rows, rows * cols * tokens, [&](int64_t begin, int64_t end) {
      const arma::fmat block(const_cast<float*>(w) + begin * cols, cols, end - begin, false, true);
      y.rows(begin, end - 1) = block.t() * x;
    });
  }
  return ok_status();
}

Status matmul_half(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&) {
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
