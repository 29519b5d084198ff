// CPU kernels for int8 weights (layout: op/int8_weight.h). Registered in cpu_kernels.cpp.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cpu {

// out[T, rows] = in[T, cols] · dequant(W)ᵀ with fp32 activations: decode dequantizes in
// registers, prefill dequantizes row panels for BLAS.
Status matmul_int8(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&);
// out[t] = dequant(table[tokens[t]]).
Status embedding_int8(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&);

}  // namespace kuiper::op::cpu
