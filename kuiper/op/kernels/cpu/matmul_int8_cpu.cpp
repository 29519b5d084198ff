// out[T, rows] = in[T, cols] · Wᵀ for int8 W with per-group fp32 scales, on the CPU.
// Decode (T = 1) is bound by reading W, which is why int8 pays: it streams a quarter of the
// bytes of fp32 and widens them in registers (AVX2: 16 weights per step, one scale multiply
// per group, one horizontal sum per row). Prefill is bound by arithmetic instead, so each
// thread dequantizes its rows of W a panel at a time into fp32 and hands each panel to BLAS.
#include <armadillo>

#include <algorithm>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/cpu_threads.h"
#include "kuiper/op/kernels/cpu/int8_cpu_kernels.h"

namespace kuiper::op::cpu {
namespace {

// Rows per prefill panel: large enough for GEMM to run at speed, small enough (≤ 2 MiB of
// fp32 for cols ≤ 2048) to stay in cache between dequantizing and multiplying.
constexpr int64_t kPanelRows = 256;

struct Int8Matrix {
  const int8_t* q;
  const float* scales;
  int64_t rows, cols;
  int group_size;
};

// Σ_c dequant(W[row, c]) · x[c] for any grouping: the row is cut where the flat index crosses
// a group boundary, and each piece is a plain int8·fp32 dot product times one scale.
float row_dot_portable(const Int8Matrix& w, int64_t row, const float* x) {
  const int64_t start = row * w.cols;
  const int8_t* q = w.q + start;
  float sum = 0.f;
  for (int64_t c = 0; c < w.cols;) {
    const int64_t group = int8_group_of(start + c, w.group_size);
    const int64_t end = std::min(w.cols, (group + 1) * w.group_size - start);
    float piece = 0.f;
#pragma omp simd reduction(+ : piece)
    for (int64_t i = c; i < end; ++i) piece += static_cast<float>(q[i]) * x[i];
    sum += piece * w.scales[group];
    c = end;
  }
  return sum;
}

#ifdef __AVX2__
inline __m256 widen8(const int8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

// The same sum for rows made of whole groups of a multiple of 16 weights.
float row_dot_avx2(const Int8Matrix& w, int64_t row, const float* x) {
  const int8_t* q = w.q + row * w.cols;
  const float* s = w.scales + row * w.cols / w.group_size;
  __m256 total = _mm256_setzero_ps();
  for (int64_t g = 0; g < w.cols / w.group_size; ++g) {
    const int8_t* qg = q + g * w.group_size;
    const float* xg = x + g * w.group_size;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int i = 0; i < w.group_size; i += 16) {
      a0 = _mm256_fmadd_ps(widen8(qg + i), _mm256_loadu_ps(xg + i), a0);
      a1 = _mm256_fmadd_ps(widen8(qg + i + 8), _mm256_loadu_ps(xg + i + 8), a1);
    }
    total = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(s[g]), total);
  }
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  return _mm_cvtss_f32(half);
}
#endif

using RowDot = float (*)(const Int8Matrix& w, int64_t row, const float* x);

RowDot pick_row_dot(const Int8Matrix& w) {
#ifdef __AVX2__
  if (w.cols % w.group_size == 0 && w.group_size % 16 == 0) return row_dot_avx2;
#endif
  return row_dot_portable;
}

void gemv_int8(const Int8Matrix& w, const float* x, float* y) {
  const RowDot row_dot = pick_row_dot(w);
#pragma omp parallel for schedule(static) if (worth_threads(w.rows * w.cols))
  for (int64_t r = 0; r < w.rows; ++r) y[r] = row_dot(w, r, x);
}

// One thread's share of rows: serial here, the caller splits the rows across threads.
void dequantize_rows(const Int8Matrix& w, int64_t first, int64_t count, float* out) {
  const int64_t begin = first * w.cols, end = begin + count * w.cols;
  for (int64_t i = begin; i < end;) {
    const int64_t group = int8_group_of(i, w.group_size);
    const int64_t stop = std::min(end, (group + 1) * w.group_size);
    const float scale = w.scales[group];
#pragma omp simd
    for (int64_t k = i; k < stop; ++k) out[k - begin] = static_cast<float>(w.q[k]) * scale;
    i = stop;
  }
}

// Each thread takes a block of rows (BLAS itself is single-threaded, see cpu_threads.h) and
// walks it a panel at a time: dequantize into its own buffer, then GEMM.
void gemm_int8(const Int8Matrix& w, const float* in, float* out, int64_t tokens) {
  // Column-major views: x is [cols, tokens], y is [rows, tokens].
  const arma::fmat x(const_cast<float*>(in), w.cols, tokens, /*copy_aux_mem=*/false, true);
  arma::fmat y(out, w.rows, tokens, false, true);
  parallel_blocks(w.rows, w.rows * w.cols * tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> panel(static_cast<size_t>(std::min(kPanelRows, end - begin) * w.cols));
    for (int64_t first = begin; first < end; first += kPanelRows) {
      const int64_t count = std::min(kPanelRows, end - first);
      dequantize_rows(w, first, count, panel.data());
      const arma::fmat wp(panel.data(), w.cols, count, false, true);  // [cols, count]
      y.rows(first, first + count - 1) = wp.t() * x;
    }
  });
}

}  // namespace

Status matmul_int8(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(weight));
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight.values, DataType::kINT8, "matmul weight"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(in, DataType::kFP32, "matmul input"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "matmul output"));
  const int64_t rows = weight.rows(), cols = weight.cols();
  if (in.numel() % cols != 0 || out.numel() != in.numel() / cols * rows) {
    return invalid_argument("matmul shapes do not fit: input " + in.describe() + ", weight " +
                            weight.values.describe() + ", output " + out.describe());
  }
  const Int8Matrix w{weight.values.data<int8_t>(), weight.scales.data<float>(), rows, cols,
                     weight.group_size};
  const int64_t tokens = in.numel() / cols;
  if (tokens == 1) {
    gemv_int8(w, in.data<float>(), out.data<float>());
  } else {
    gemm_int8(w, in.data<float>(), out.data<float>(), tokens);
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
