// out[T, rows] = in[T, cols] · Wᵀ on the GPU.
// Decode (T = 1) is the weight-streaming GEMV of decode_gemv.cu. Prefill (T > 1) is a GEMM on
// cuBLAS: fp16/bf16 weights run on the tensor cores after the activations are rounded to the
// weights' type in a scratch buffer, accumulating and writing fp32; fp32 weights run as a true
// fp32 GEMM (no TF32), so that fp32 models stay exact to fp32 rounding.
#include "kuiper/base/cuda_utils.h"
#include "kuiper/base/device.h"
#include "kuiper/op/kernels/cuda/cuda_backend.cuh"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/elementwise_loop.cuh"

namespace kuiper::op::cuda {
namespace {

template <typename T, int kWidth>
__global__ void round_activations_kernel(const float* in, T* out, int64_t n) {
  for_each_group<kWidth>(n, [&]<int W>(int64_t i) { Floats<W>::load(in + i).store_as(out + i); });
}

// in (fp32) rounded to T in the context's GEMM input scratch.
template <typename T>
StatusOr<T*> rounded_input(const Tensor& in, const ExecutionContext& ctx) {
  const int64_t n = in.numel();
  KUIPER_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(ScratchUse::kGemmInput, n * sizeof(T)));
  launch_by_width(n, {in.raw_data(), scratch}, [&](auto width, unsigned blocks) {
    round_activations_kernel<T, width()><<<blocks, kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
        in.data<float>(), static_cast<T*>(scratch), n);
  });
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("round activations");
  return static_cast<T*>(scratch);
}

template <typename T>
constexpr cudaDataType_t cuda_data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
  return CUDA_R_16BF;
}

// A GEMM of at most this many tokens (a decode step of the engine's sequences) runs without
// cuBLAS's workspace. With one, cuBLAS splits such GEMMs along K and sums the splits in a second
// kernel, whose launch and the wait before it cost a batched step more than the split gains;
// prefill keeps it, where the split gains more (docs/performance.md, "Measurements behind other choices").
constexpr int64_t kGemmWithoutWorkspaceMaxTokens = 32;

template <typename T>
Status gemm(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  const int64_t rows = weight.rows(), cols = weight.cols(), tokens = in.numel() / cols;
  const void* b = in.raw_data();
  if constexpr (!std::is_same_v<T, float>) {
    if (in.dtype() == DataType::kFP32) {  // else in is T already (the table's matmul_input)
      KUIPER_ASSIGN_OR_RETURN(b, rounded_input<T>(in, ctx));
    }
  }
  // Row-major out[T, rows] is column-major outᵀ[rows, T] = W·inᵀ, where row-major W[rows,
  // cols] read column-major is Wᵀ (hence OP_T) and row-major in[T, cols] is inᵀ.
  const float alpha = 1.f, beta = 0.f;
  constexpr cudaDataType_t type = cuda_data_type<T>();
  KUIPER_ASSIGN_OR_RETURN(cublasHandle_t cublas, cublas_handle(ctx, tokens > kGemmWithoutWorkspaceMaxTokens));
  return cublas_status(
      cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                   static_cast<int>(tokens), static_cast<int>(cols), &alpha,
                   weight.values.raw_data(), type, static_cast<int>(cols), b, type,
                   static_cast<int>(cols), &beta, out.raw_data(), CUDA_R_32F,
                   static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace

Status matmul(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "matmul output"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(weight.values, "matmul weight"));
  // fp32, or already in the weight's 16-bit type (the table's matmul_input).
  KUIPER_RETURN_IF_ERROR(expect_cuda(in, in.dtype() == DataType::kFP32 ? DataType::kFP32 : weight.dtype(),
                                     "matmul input"));
  if (weight.values.ndim() != 2) {
    return invalid_argument("matmul weight must be 2-d, got " + weight.values.describe());
  }
  const int64_t rows = weight.rows(), cols = weight.cols();
  if (cols == 0 || in.numel() % cols != 0 || out.numel() != in.numel() / cols * rows) {
    return invalid_argument("matmul shapes do not fit: input " + in.describe() + ", weight " +
                            weight.values.describe() + ", output " + out.describe());
  }
  if (rows > INT32_MAX || cols > INT32_MAX || in.numel() / cols > INT32_MAX) {
    return unsupported("matmul dimensions beyond 2^31: weight " + weight.values.describe());
  }
  const int64_t tokens = in.numel() / cols;
  if (tokens == 0 || rows == 0) return ok_status();
  if (tokens == 1 && in.dtype() == DataType::kFP32) {
    return decode_gemv({.in = &in, .weight = &weight, .out = &out}, ctx);
  }
  return dispatch_float_type(weight.dtype(), [&](auto zero) {
    return gemm<decltype(zero)>(in, weight, out, ctx);
  });
}

StatusOr<const __nv_bfloat16*> gemm_input_bf16(const Tensor& in, const ExecutionContext& ctx) {
  KUIPER_ASSIGN_OR_RETURN(const __nv_bfloat16* rounded, rounded_input<__nv_bfloat16>(in, ctx));
  return rounded;
}

}  // namespace kuiper::op::cuda
