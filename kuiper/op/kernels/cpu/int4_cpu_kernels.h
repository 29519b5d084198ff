// CPU kernels for int4 weights (layout: op/int4_weight.h). Registered in cpu_kernels.cpp.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cpu {

// out[T, rows] = in[T, cols] · dequant(W)ᵀ. With AVX2, whole groups per row and a group size
// that is a power of two ≥ 32, decode and prefill alike quantize each input row to int8 in
// blocks of 32 (one fp32 scale each, as llama.cpp's Q8_0) and multiply it with the unpacked
// nibbles as int8 dot products, so each output differs from the exact product of the
// dequantized weights by at most Σ_i |w_i| · scale_x(i) / 2 (scale_x = max|x| / 127 of the
// block of x_i). Otherwise decode takes fp32 dot products and prefill dequantizes row panels
// for BLAS.
Status matmul_int4(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&);
// out[t] = dequant(table[tokens[t]]).
Status embedding_int4(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&);

// Whether matmuls with `weight` quantize their input to int8 (the bound above applies).
bool int4_gemv_quantizes_input(const Weight& weight);

}  // namespace kuiper::op::cpu
