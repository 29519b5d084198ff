// The parts of the quantized-weight CPU kernels that do not depend on how a weight is coded:
// the embedding lookup and the matmul, written once over the coding's function that
// dequantizes rows and its decode GEMV, and the GEMV's threaded row loop. Prefill is bound by
// arithmetic, not by reading W, so each thread dequantizes its rows of W a panel at a time into
// fp32 and hands each panel to BLAS; decode is bound by reading W, so the GEMV works on the
// coded bytes.
#pragma once

#include <cstdint>

#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cpu/cpu_threads.h"

namespace kuiper::op::cpu {

// Writes rows [first, first + count) of `w` as fp32 to out ([count, cols]); serial.
using DequantizeRows = void (*)(const Weight& w, int64_t first, int64_t count, float* out);

// out[t] = dequant(table[tokens[t]]), checking shapes and token ids.
Status embedding_dequantized(const Tensor& tokens, const Weight& table, Tensor& out, DequantizeRows dequantize);

// Writes y = dequant(w) · x for one token (decode), threaded (gemv_rows).
using Gemv = void (*)(const Weight& w, const float* x, float* y);

// Writes out[T, rows] = in[T, cols] · dequant(w)ᵀ for T > 1 on the coded weights, threaded, and
// returns true; false, writing nothing, where the coding has no such kernel for `w`.
using CodedGemm = bool (*)(const Weight& w, const float* in, float* out, int64_t tokens);

// out[T, rows] = in[T, cols] · dequant(W)ᵀ, checking shapes: decode (T = 1) through the
// coding's own gemv; prefill (T > 1) through its coded gemm where it has one, otherwise a panel
// of rows at a time, threads splitting the rows.
Status matmul_quantized(const Tensor& in, const Weight& w, Tensor& out, DequantizeRows dequantize, Gemv gemv,
                        CodedGemm gemm = nullptr);

// How far ahead of what a decode row kernel multiplies it asks for its weight bytes. Left to
// the hardware prefetcher, a core waits for each miss and then computes: the int4 GEMV read
// half of what one core can read from DRAM. Prefetches this far ahead,
// spread through the block loop, keep the misses in flight while it computes
// (docs/performance.md, "CPU").
inline constexpr int64_t kGemvPrefetchBytes = 4096;

// Prefetches the line `distance` bytes past p. A hint: it never faults, so it may run past the
// end of the matrix.
inline void prefetch_ahead(const void* p, int64_t distance) {
  __builtin_prefetch(static_cast<const char*>(p) + distance, 0, 3);
}

// The decode GEMV's row loop: y[r] = row_dot(r) for r in [0, rows), threads splitting the rows
// when the rows · cols weights pay for them. A template, so that each coding's row kernel is
// compiled into the loop rather than called through a pointer.
template <typename RowDot>
void gemv_rows(int64_t rows, int64_t cols, float* y, const RowDot& row_dot);

}  // namespace kuiper::op::cpu

template <typename RowDot>
void kuiper::op::cpu::gemv_rows(int64_t rows, int64_t cols, float* y, const RowDot& row_dot) {
#pragma omp parallel for schedule(static) if (worth_threads(rows * cols))
  for (int64_t r = 0; r < rows; ++r) y[r] = row_dot(r);
}
