// CUDA kernels for int8 weights (layout: op/int8_weight.h). Registered in cuda_kernels.cu.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cuda {

// out[T, rows] = in[T, cols] · dequant(W)ᵀ. Decode is an int8 GEMV in fp32; batched decode
// (T ≤ kMultiTokenGemvMaxTokens, dequantized_gemm.cuh) a GEMV over the tokens with the input
// quantized to int8 in blocks of 32 (as the int4 one below); prefill dequantizes W to bf16
// scratch and runs the bf16 tensor-core GEMM of matmul().
Status matmul_int8(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx);
// out[t] = dequant(table[tokens[t]]); an id outside the table yields a zero row.
Status embedding_int8(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx);

}  // namespace kuiper::op::cuda
