// CUDA kernels for int4 weights (layout: op/int4_weight.h). Registered in cuda_kernels.cu.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cuda {

// out[T, rows] = in[T, cols] · dequant(W)ᵀ. Decode is the int4 decode GEMV (with the fused
// epilogues): where rows are 16-byte aligned, cols is a multiple of 32 up to 32768 (decode_gemv_int8_input_rows.cuh) and
// the group size is a power of two ≥ 32, it quantizes its input to int8 in blocks of 32 as the
// CPU kernel does, within the same bound (cpu/int4_cpu_kernels.h); otherwise fp32 products.
// Batched decode (T ≤ kMultiTokenGemvMaxTokens, dequantized_gemm.cuh) is a GEMV over the
// tokens with the input quantized alike. Prefill dequantizes W to bf16 scratch and runs the
// bf16 tensor-core GEMM of matmul().
Status matmul_int4(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx);
// out[t] = dequant(table[tokens[t]]); an id outside the table yields a zero row.
Status embedding_int4(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx);

}  // namespace kuiper::op::cuda
