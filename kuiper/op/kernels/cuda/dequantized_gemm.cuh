// What the int8 and int4 matmuls share on the GPU, and which path a call of T tokens takes
// (quantized_matmul): decode (T = 1) streams W once through the GEMV of decode_gemv.cu; batched
// decode of 2-8 tokens streams it once through the multi-token GEMV (multi_token_gemv.cu, once
// per 8 tokens up to 32 for weights the next path does not tile), and of 9-64 tokens once
// through the tensor-core GEMM of quantized_mma.cu; prefill is compute-bound: W is dequantized
// to bf16 into scratch memory and multiplied by the bf16 tensor-core GEMM behind matmul().
#pragma once

#include <cuda_bf16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"

namespace kuiper::op::cuda {

// Checks in [T, cols], out [T, rows] (fp32) and `weight` (values of `dtype`) on the GPU and
// returns T.
StatusOr<int64_t> quantized_matmul_tokens(const Tensor& in, const Weight& weight, const Tensor& out, DataType dtype);

// The most tokens the multi-token GEMV takes (for weights quantized_mma does not fit); more go
// to gemm_via_bf16. Bytes moved per weight (int8 with groups of 64: 1 + 4/64 bytes; int4 with
// groups of 32 and mins: 0.5 + 8/32):
//  - gemm_via_bf16: the dequantize kernel reads W and writes 2 bytes of bf16, the GEMM reads
//    those 2 bytes again: 5.06 bytes (int8), 4.75 (int4), whatever T, plus a launch;
//  - the multi-token GEMV reads W once per tile of 8 tokens: ceil(T / 8) × 1.06 bytes (int8),
//    × 0.75 (int4), plus x quantized once (1.25 bytes per input and token, negligible).
// At T = 32 that is 4.25 bytes against 5.06 for int8, and 3 against 4.75 for int4; at T = 40
// int8 reads 5.3, past the GEMM. 32 is the largest multiple of a tile where both dtypes read
// fewer bytes.
inline constexpr int64_t kMultiTokenGemvMaxTokens = 32;

// From this many tokens up to kQuantizedMmaMaxTokens, quantized_mma takes the weights it fits.
// The multi-token GEMV multiplies on the CUDA cores, 8 tokens per weight load; past one tile of 8
// it is compute-bound (docs/performance.md), and the tensor cores take over.
inline constexpr int64_t kQuantizedMmaMinTokens = 9;
inline constexpr int kQuantizedMmaMaxTokens = 64;

// Whether quantized_mma reads `weight` for `tokens` tokens: at most kQuantizedMmaMaxTokens,
// rows a multiple of 32, cols of 128, groups a power of two of at least 32 weights, 16-byte
// aligned values and 4-byte aligned scales (and mins).
bool quantized_mma_fits(int64_t tokens, const Weight& weight);
// out[T, rows] = in[T, cols] · dequant(W)ᵀ on the tensor cores, for int8 or int4 weights that
// quantized_mma_fits: W dequantized to bf16 as the dequantize kernels round it, in rounded to
// bf16 in the GEMM input scratch (symmetric int4: with its columns interleaved), fp32 sums.
// Column splits borrow the dequantized-weight scratch.
Status quantized_mma(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx);

// in (fp32) rounded to bf16 in the context's GEMM input scratch (matmul_cuda.cu).
StatusOr<const __nv_bfloat16*> gemm_input_bf16(const Tensor& in, const ExecutionContext& ctx);

// Whether the multi-token GEMV reads `weight` with input `in`: cols a multiple of 32, groups a
// power of two ≥ 32 (a block of 32 weights lies in one group), 16-byte aligned values and input.
bool multi_token_gemv_fits(const Tensor& in, const Weight& weight);
// out[T, rows] = in[T, cols] · dequant(W)ᵀ by the multi-token GEMV (int8 or int4 weights that
// multi_token_gemv_fits); its quantized input borrows the context's GEMM input scratch.
Status multi_token_gemv(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx);

// out = in · dequant(W)ᵀ for T > 1: dequantize(bf16* scratch, stream) queues the kernel that
// writes W as bf16 [rows, cols] into the context's scratch, then the GEMM reads it there.
template <typename Dequantize>
Status gemm_via_bf16(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx,
                     Dequantize&& dequantize) {
  const size_t bytes = static_cast<size_t>(weight.numel()) * sizeof(__nv_bfloat16);
  KUIPER_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(ScratchUse::kDequantizedWeight, bytes));
  dequantize(static_cast<__nv_bfloat16*>(scratch), as_cuda_stream(ctx.stream()));
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("dequantize to bf16");
  // The scratch is the context's: it outlives the call, and the GEMM is queued on the same stream.
  const auto buffer = Buffer::borrow(scratch, bytes, DeviceType::kCUDA, nullptr);
  KUIPER_ASSIGN_OR_RETURN(Tensor values, Tensor::view(buffer, 0, DataType::kBF16, {weight.rows(), weight.cols()}));
  return matmul(in, Weight{std::move(values), Tensor(), 0}, out, ctx);
}

// out[T, rows] = in[T, cols] · dequant(W)ᵀ for int8 or int4 W (`dtype`), by the path for T
// (above); dequantize as for gemm_via_bf16.
template <typename Dequantize>
Status quantized_matmul(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx,
                        DataType dtype, Dequantize&& dequantize) {
  KUIPER_ASSIGN_OR_RETURN(const int64_t tokens, quantized_matmul_tokens(in, weight, out, dtype));
  if (tokens == 0) return ok_status();
  if (tokens == 1) return decode_gemv({.in = &in, .weight = &weight, .out = &out}, ctx);
  if (tokens >= kQuantizedMmaMinTokens && quantized_mma_fits(tokens, weight)) {
    return quantized_mma(in, weight, out, ctx);
  }
  if (tokens <= kMultiTokenGemvMaxTokens && multi_token_gemv_fits(in, weight)) {
    return multi_token_gemv(in, weight, out, ctx);
  }
  return gemm_via_bf16(in, weight, out, ctx, std::forward<Dequantize>(dequantize));
}

}  // namespace kuiper::op::cuda
