// Where the attention kernels write their normalised output (kernel_table.h, AttentionKernel):
// fp32, or rounded to the fp16/bf16 that the matmul after attention reads, which spares that
// matmul a rounding pass. The dtype is a kernel argument, the same for the whole grid, so each
// attention kernel is compiled once rather than once per output type. Decode of one row may also
// write its output quantized in halves (int8_halves.cuh) for an int8 or int4 wo to read.
#pragma once

#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/int8_halves.cuh"
#include "kuiper/tensor/tensor.h"

namespace kuiper::op::cuda {

struct AttentionOutput {
  void* data = nullptr;
  DataType dtype = DataType::kFP32;  // fp32, fp16 or bf16: the wrappers check
  void* halves = nullptr;             // where not null: one row of `outputs` values, quantized as well
  int outputs = 0;

  // Element i, and its quantized half where halves is set: then whole warps call it, lanes
  // 16h .. 16h + 15 holding 16 consecutive elements of one half (quantize_half).
  __device__ __forceinline__ void store(int64_t i, float v) const {
    switch (dtype) {
      case DataType::kFP16: static_cast<__half*>(data)[i] = from_float<__half>(v); break;
      case DataType::kBF16: static_cast<__nv_bfloat16*>(data)[i] = from_float<__nv_bfloat16>(v); break;
      default: static_cast<float*>(data)[i] = v; break;
    }
    if (halves != nullptr) quantize_half(v, static_cast<int>(i), true, int8_halves_at(halves, outputs));
  }
  // Elements i and i + 1, in one access (i even, the output 8-byte aligned; never quantized).
  __device__ __forceinline__ void store_pair(int64_t i, float a, float b) const {
    switch (dtype) {
      case DataType::kFP16: *reinterpret_cast<__half2*>(static_cast<__half*>(data) + i) = __floats2half2_rn(a, b); break;
      case DataType::kBF16:
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(data) + i) = __floats2bfloat162_rn(a, b);
        break;
      default: *reinterpret_cast<float2*>(static_cast<float*>(data) + i) = make_float2(a, b); break;
    }
  }
};

// `quantized` (null: none) receives the one row quantized as well.
inline AttentionOutput attention_output(Tensor& out, Tensor* quantized = nullptr) {
  if (quantized == nullptr) return {out.raw_data(), out.dtype()};
  return {out.raw_data(), out.dtype(), quantized->raw_data(), static_cast<int>(out.numel())};
}

}  // namespace kuiper::op::cuda
