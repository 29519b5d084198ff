// The parts of the quantized-weight CPU kernels that do not depend on how a weight is coded,
// written once over a function that dequantizes rows: the embedding lookup and the prefill
// GEMM. Prefill is bound by arithmetic, not by reading W, so each thread dequantizes its rows
// of W a panel at a time into fp32 and hands each panel to BLAS.
#pragma once

#include <cstdint>

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cpu {

// Writes rows [first, first + count) of `w` as fp32 to out ([count, cols]); serial.
using DequantizeRows = void (*)(const Weight& w, int64_t first, int64_t count, float* out);

// out[t] = dequant(table[tokens[t]]), checking shapes and token ids.
Status embedding_dequantized(const Tensor& tokens, const Weight& table, Tensor& out, DequantizeRows dequantize);

// out[tokens, rows] = in[tokens, cols] · dequant(W)ᵀ, a panel of rows at a time, threads
// splitting the rows.
void gemm_dequantized(const Weight& w, const float* in, float* out, int64_t tokens, DequantizeRows dequantize);

// Checks a quantized matmul's fp32 input and output against the weight's shape.
Status check_matmul_shapes(const Tensor& in, const Weight& weight, const Tensor& out);

}  // namespace kuiper::op::cpu
