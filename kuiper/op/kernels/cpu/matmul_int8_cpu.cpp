// out[T, rows] = in[T, cols] · Wᵀ for int8 W with per-group fp32 scales, on the CPU.
// Decode (T = 1) is bound by reading W, which is why int8 pays: it streams a quarter of the
// bytes of fp32 and widens them in registers (AVX2: 16 weights per step, one scale multiply
// per group, one horizontal sum per row). Prefill dequantizes panels for BLAS
// (dequantized_rows.h).
#include <algorithm>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/dequantized_rows.h"
#include "kuiper/op/kernels/cpu/int8_cpu_kernels.h"

namespace kuiper::op::cpu {
namespace {

struct Int8Matrix {
  const int8_t* q;
  const float* scales;
  int64_t rows, cols;
  int group_size;
};

Int8Matrix matrix_of(const Weight& w) {
  return {w.values.data<int8_t>(), w.scales.data<float>(), w.rows(), w.cols(), w.group_size};
}

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
    // The rows of a thread are consecutive in memory, so this reaches into the next rows.
    prefetch_ahead(qg, kGemvPrefetchBytes);
    prefetch_ahead(s + g, kGemvPrefetchBytes * 4 / w.group_size);
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

void gemv_int8(const Weight& weight, const float* x, float* y) {
  const Int8Matrix w = matrix_of(weight);
#ifdef __AVX2__
  if (w.cols % w.group_size == 0 && w.group_size % 16 == 0) {
    gemv_rows(w.rows, w.cols, y, [&](int64_t r) { return row_dot_avx2(w, r, x); });
    return;
  }
#endif
  gemv_rows(w.rows, w.cols, y, [&](int64_t r) { return row_dot_portable(w, r, x); });
}

void dequantize_int8_rows(const Weight& weight, int64_t first, int64_t count, float* out) {
  const int8_t* q = weight.values.data<int8_t>();
  const float* scales = weight.scales.data<float>();
  const int64_t begin = first * weight.cols(), end = begin + count * weight.cols();
  for (int64_t i = begin; i < end;) {
    const int64_t group = int8_group_of(i, weight.group_size);
    const int64_t stop = std::min(end, (group + 1) * weight.group_size);
    const float scale = scales[group];
#pragma omp simd
    for (int64_t k = i; k < stop; ++k) out[k - begin] = static_cast<float>(q[k]) * scale;
    i = stop;
  }
}

}  // namespace

Status matmul_int8(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(weight));
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight.values, DataType::kINT8, "matmul weight"));
  return matmul_quantized(in, weight, out, dequantize_int8_rows, gemv_int8);
}

Status embedding_int8(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(table));
  KUIPER_RETURN_IF_ERROR(expect_cpu(table.values, DataType::kINT8, "embedding table"));
  return embedding_dequantized(tokens, table, out, dequantize_int8_rows);
}

}  // namespace kuiper::op::cpu
