// What the int8 and int4 matmuls share on the GPU. Decode (T = 1) streams W once through the
// GEMV of decode_gemv.cu. Prefill (T > 1) is compute-bound: W is dequantized to bf16 into
// scratch memory and multiplied by the bf16 tensor-core GEMM behind matmul().
#pragma once

#include <cuda_bf16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"

namespace kuiper::op::cuda {

// Checks in [T, cols], out [T, rows] (fp32) and `weight` (values of `dtype`) on the GPU and
// returns T.
StatusOr<int64_t> quantized_matmul_tokens(const Tensor& in, const Weight& weight, const Tensor& out, DataType dtype);

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

}  // namespace kuiper::op::cuda
