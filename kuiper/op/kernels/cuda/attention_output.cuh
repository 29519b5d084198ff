// Where the attention kernels write their normalised output (kernel_table.h, AttentionKernel):
// fp32, or rounded to the fp16/bf16 that the matmul after attention reads, which spares that
// matmul a rounding pass. The dtype is a kernel argument, the same for the whole grid, so each
// attention kernel is compiled once rather than once per output type.
#pragma once

#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/tensor/tensor.h"

namespace kuiper::op::cuda {

struct AttentionOutput {
  void* data = nullptr;
  DataType dtype = DataType::kFP32;  // fp32, fp16 or bf16: the wrappers check

  __device__ __forceinline__ void store(int64_t i, float v) const {
    switch (dtype) {
      case DataType::kFP16: static_cast<__half*>(data)[i] = from_float<__half>(v); break;
      case DataType::kBF16: static_cast<__nv_bfloat16*>(data)[i] = from_float<__nv_bfloat16>(v); break;
      default: static_cast<float*>(data)[i] = v; break;
    }
  }
  // Elements i and i + 1, in one access (i even, the output 8-byte aligned).
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

inline AttentionOutput attention_output(Tensor& out) { return {out.raw_data(), out.dtype()}; }

}  // namespace kuiper::op::cuda
