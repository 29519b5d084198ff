// out[T, rows] = in[T, cols] · Wᵀ for int4 W (two weights a byte, per-group fp32 scales and
// optional mins), on the CPU. Decode is bound by reading W: int4 streams about half the bytes of
// int8, but the int8 kernel's way (widen to fp32, one FMA a weight) already runs below the
// memory bandwidth on AVX2, so the int4 GEMV works in integers instead: the input is quantized
// once to int8 in blocks of 32, and each block of 32 nibbles becomes one 32-byte vector
// (mask and shift, no widening) multiplied with it by maddubs (u8 × s8 pairs → s16) and madd
// (→ s32): four instructions for 32 weights. The nibbles' offset (8, or the min) is applied
// per group through the sum of the group's quantized inputs. Prefill does the same with every
// token row, unpacking each block once for eight tokens; where the shape does not allow it, it
// dequantizes panels for BLAS (dequantized_rows.h). docs/performance.md has the measurements.
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/dequantized_rows.h"
#include "kuiper/op/kernels/cpu/int4_cpu_kernels.h"

namespace kuiper::op::cpu {
namespace {

struct Int4Matrix {
  const uint8_t* packed;
  const float* scales;
  const float* mins;  // null: symmetric
  int64_t rows, cols;
  int group_size;
};

Int4Matrix matrix_of(const Weight& w) {
  return {w.values.data<uint8_t>(), w.scales.data<float>(), w.mins.is_empty() ? nullptr : w.mins.data<float>(),
          w.rows(), w.cols(), w.group_size};
}

// Prefill's panels: a group (or the part of it inside the rows asked for) at a time, so that
// the inner loop has one scale and one offset and vectorizes. Groups and rows start on an even
// flat index (even group size and cols), so every piece is whole bytes.
void dequantize_int4_rows(const Weight& weight, int64_t first, int64_t count, float* out) {
  const Int4Matrix w = matrix_of(weight);
  const int64_t begin = first * w.cols, end = begin + count * w.cols;
  for (int64_t i = begin; i < end;) {
    const int64_t g = weight_group_of(i, w.group_size);
    const int64_t stop = std::min(end, (g + 1) * w.group_size);
    const float scale = w.scales[g];
    const float offset = w.mins ? w.mins[g] : -static_cast<float>(kInt4SymmetricZero) * scale;
    const uint8_t* bytes = w.packed + i / 2;
    float* o = out + (i - begin);
#pragma omp simd
    for (int64_t k = 0; k < (stop - i) / 2; ++k) {
      o[2 * k] = static_cast<float>(bytes[k] & 0x0F) * scale + offset;
      o[2 * k + 1] = static_cast<float>(bytes[k] >> 4) * scale + offset;
    }
    i = stop;
  }
}

// Σ_c dequant(W[row, c]) · x[c] for any grouping, in fp32: the row is cut where the flat index
// crosses a group boundary; each piece is Σ (q − zero) · x times the scale, plus min · Σ x.
float row_dot_portable(const Int4Matrix& w, int64_t row, const float* x) {
  const int64_t start = row * w.cols;
  const int zero = w.mins ? 0 : kInt4SymmetricZero;
  float sum = 0.f;
  for (int64_t c = 0; c < w.cols;) {
    const int64_t group = weight_group_of(start + c, w.group_size);
    const int64_t end = std::min(w.cols, (group + 1) * w.group_size - start);
    float piece = 0.f, x_sum = 0.f;
    for (int64_t i = c; i < end; ++i) {
      piece += static_cast<float>(int4_nibble(w.packed, start + i) - zero) * x[i];
      x_sum += x[i];
    }
    sum += piece * w.scales[group] + (w.mins ? w.mins[group] * x_sum : 0.f);
    c = end;
  }
  return sum;
}

#ifdef __AVX2__
constexpr int kBlock = 32;  // inputs per int8 scale; weights per 16-byte load

// The input quantized for the integer dot products. Block b holds its 32 inputs reordered the
// way a 16-byte load of nibbles unpacks: the 16 even-indexed ones (low nibbles) first, then the
// 16 odd-indexed ones (high nibbles).
struct QuantizedInput {
  std::vector<int8_t> q;          // [cols]
  std::vector<float> scale;       // [cols / 32]: max|x| / 127 of the block
  std::vector<float> group_sum;   // [cols / group_size]: Σ x̂ over the weight group's columns
};

// Rows are whole groups here, so the groups of every row cover the same columns.
void quantize_input(const float* x, int64_t cols, int group_size, QuantizedInput& out) {
  const int64_t blocks = cols / kBlock, blocks_per_group = group_size / kBlock;
  out.q.resize(cols);
  out.scale.resize(blocks);
  out.group_sum.assign(cols / group_size, 0.f);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kBlock;
    float max_abs = 0.f;
    for (int i = 0; i < kBlock; ++i) max_abs = std::max(max_abs, std::fabs(xb[i]));
    const float scale = max_abs / 127.f;
    int q_sum = 0;
    for (int i = 0; i < kBlock; ++i) {
      const int q = scale > 0.f ? static_cast<int>(std::nearbyint(xb[i] / scale)) : 0;
      out.q[b * kBlock + (i % 2) * (kBlock / 2) + i / 2] = static_cast<int8_t>(q);
      q_sum += q;
    }
    out.scale[b] = scale;
    out.group_sum[b / blocks_per_group] += scale * static_cast<float>(q_sum);
  }
}

// The 32 nibbles of a block's 16 bytes in one vector, low nibbles first (QuantizedInput's order).
inline __m256i unpack_block(const uint8_t* packed) {
  const __m128i low_nibbles = _mm_set1_epi8(0x0F);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibbles), _mm_and_si128(bytes, low_nibbles));
}

// A block's 32 nibbles times its quantized inputs: the 32 products summed to 8 int32 lanes.
// With VNNI one instruction does maddubs and madd's work; the sums are the same, since
// maddubs cannot saturate on nibbles (2 · 15 · 127 < 2^15).
inline __m256i nibble_dots(__m256i nibbles, const int8_t* xq) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles, x);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), nibbles, x);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, x), _mm256_set1_epi16(1));
#endif
}

inline __m256i block_dots(const uint8_t* packed, const int8_t* xq) { return nibble_dots(unpack_block(packed), xq); }

inline float horizontal_sum(__m256 v) {
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  return _mm_cvtss_f32(half);
}

// The nibbles' offsets, Σ over the row's groups of (min, or −8 · scale) · Σ x̂ of the group: a
// separate pass, so that the block loop carries no scalar chain from block to block.
float row_offsets(const Int4Matrix& w, int64_t first_group, const QuantizedInput& x) {
  const int64_t groups = static_cast<int64_t>(x.group_sum.size());
  const float* sums = x.group_sum.data();
  float total = 0.f;
  if (w.mins) {
    const float* mins = w.mins + first_group;
#pragma omp simd reduction(+ : total)
    for (int64_t g = 0; g < groups; ++g) total += mins[g] * sums[g];
  } else {
    const float* scales = w.scales + first_group;
#pragma omp simd reduction(+ : total)
    for (int64_t g = 0; g < groups; ++g) total += scales[g] * sums[g];
    total *= -static_cast<float>(kInt4SymmetricZero);
  }
  return total;
}

float row_dot_avx2(const Int4Matrix& w, int64_t row, const QuantizedInput& x) {
  const int64_t blocks = w.cols / kBlock, groups = w.cols / w.group_size;
  const int group_shift = std::countr_zero(static_cast<unsigned>(w.group_size / kBlock));
  const uint8_t* packed = w.packed + row * w.cols / 2;
  const float* scales = w.scales + row * groups;
  // sum = Σ_b (scale of b's group · scale of b's inputs) · dots of b, in two sums taking
  // alternate blocks, so that consecutive FMAs do not wait for each other.
  const auto term = [&](int64_t b) {
    const __m256i dots = block_dots(packed + b * kBlock / 2, x.q.data() + b * kBlock);
    return std::pair{_mm256_cvtepi32_ps(dots), _mm256_set1_ps(scales[b >> group_shift] * x.scale[b])};
  };
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < blocks; b += 2) {
    // The rows of a thread are consecutive in memory, so this reaches into the next rows.
    prefetch_ahead(packed + b * kBlock / 2, kGemvPrefetchBytes);
    if (b % 16 == 0) {
      prefetch_ahead(scales + (b >> group_shift), kGemvPrefetchBytes / 4);
      if (w.mins) prefetch_ahead(w.mins + row * groups + (b >> group_shift), kGemvPrefetchBytes / 4);
    }
    const auto [d0, s0] = term(b);
    const auto [d1, s1] = term(b + 1);
    even = _mm256_fmadd_ps(d0, s0, even);
    odd = _mm256_fmadd_ps(d1, s1, odd);
  }
  if (b < blocks) {
    const auto [d, s] = term(b);
    even = _mm256_fmadd_ps(d, s, even);
  }
  return horizontal_sum(_mm256_add_ps(even, odd)) + row_offsets(w, row * groups, x);
}

// Prefill: row `row` times the N quantized token rows x[0..N), y[t · y_stride] = the product
// with x[t]. Each block's nibbles are unpacked once for the N tokens, which is what makes this
// cheaper than N GEMVs; each token's sum is one FMA chain, N of them independent.
template <int N>
void row_dots_tokens(const Int4Matrix& w, int64_t row, const QuantizedInput* x, float* y, int64_t y_stride) {
  const int64_t blocks = w.cols / kBlock, groups = w.cols / w.group_size;
  const int group_shift = std::countr_zero(static_cast<unsigned>(w.group_size / kBlock));
  const uint8_t* packed = w.packed + row * w.cols / 2;
  const float* scales = w.scales + row * groups;
  __m256 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i nibbles = unpack_block(packed + b * kBlock / 2);
    const float scale = scales[b >> group_shift];
    for (int t = 0; t < N; ++t) {
      const __m256 dots = _mm256_cvtepi32_ps(nibble_dots(nibbles, x[t].q.data() + b * kBlock));
      acc[t] = _mm256_fmadd_ps(dots, _mm256_set1_ps(scale * x[t].scale[b]), acc[t]);
    }
  }
  for (int t = 0; t < N; ++t) y[t * y_stride] = horizontal_sum(acc[t]) + row_offsets(w, row * groups, x[t]);
}

#endif

void gemv_int4(const Weight& weight, const float* x, float* y) {
  const Int4Matrix w = matrix_of(weight);
#ifdef __AVX2__
  if (int4_gemv_quantizes_input(weight)) {
    QuantizedInput xq;
    quantize_input(x, w.cols, w.group_size, xq);
    gemv_rows(w.rows, w.cols, y, [&](int64_t r) { return row_dot_avx2(w, r, xq); });
    return;
  }
#endif
  gemv_rows(w.rows, w.cols, y, [&](int64_t r) { return row_dot_portable(w, r, x); });
}

// Prefill on the coded weights where the decode GEMV quantizes its input: every token row
// quantized to int8 as for decode, then each thread's rows times eight tokens at a time. Against
// dequantizing panels for BLAS this skips writing and packing fp32 weights, which took most of
// the time (docs/performance.md).
bool gemm_int4(const Weight& weight, const float* in, float* out, int64_t tokens) {
#ifdef __AVX2__
  if (!int4_gemv_quantizes_input(weight)) return false;
  const Int4Matrix w = matrix_of(weight);
  std::vector<QuantizedInput> xq(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) quantize_input(in + t * w.cols, w.cols, w.group_size, xq[t]);
  constexpr int64_t kTile = 8;  // 8 accumulators: faster than 4 (docs/performance.md)
  parallel_blocks(w.rows, w.rows * w.cols * tokens, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t t = 0;
      for (; t + kTile <= tokens; t += kTile) row_dots_tokens<kTile>(w, r, &xq[t], out + t * w.rows + r, w.rows);
      for (; t < tokens; ++t) row_dots_tokens<1>(w, r, &xq[t], out + t * w.rows + r, w.rows);
    }
  });
  return true;
#else
  (void)weight, (void)in, (void)out, (void)tokens;
  return false;
#endif
}

}  // namespace

bool int4_gemv_quantizes_input(const Weight& weight) {
#ifdef __AVX2__
  return weight.cols() % weight.group_size == 0 && weight.group_size % kBlock == 0 &&
         std::has_single_bit(static_cast<unsigned>(weight.group_size));
#else
  (void)weight;
  return false;
#endif
}

Status matmul_int4(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_int4_weight(weight));
  KUIPER_RETURN_IF_ERROR(expect_cpu(weight.values, DataType::kINT4, "matmul weight"));
  return matmul_quantized(in, weight, out, dequantize_int4_rows, gemv_int4, gemm_int4);
}

Status embedding_int4(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_int4_weight(table));
  KUIPER_RETURN_IF_ERROR(expect_cpu(table.values, DataType::kINT4, "embedding table"));
  return embedding_dequantized(tokens, table, out, dequantize_int4_rows);
}

}  // namespace kuiper::op::cpu
