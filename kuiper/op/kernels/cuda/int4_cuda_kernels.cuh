// CUDA kernels for int4 weights (layout: op/int4_weight.h). Registered in cuda_kernels.cu.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cuda {

// out[T, rows] = in[T, cols] · dequant(W)ᵀ. Decode is the int4 decode GEMV (with the fused
// epilogues); prefill dequantizes W to bf16 scratch and runs the bf16 tensor-core GEMM of matmul().
Status matmul_int4(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx);
// out[t] = dequant(table[tokens[t]]); an id outside the table yields a zero row.
Status embedding_int4(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx);

}  // namespace kuiper::op::cuda
