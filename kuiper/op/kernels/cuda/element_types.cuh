// The storage types kernels read weights and caches in, and their conversions to and from the
// fp32 that all arithmetic is done in.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "kuiper/base/status.h"
#include "kuiper/base/types.h"

namespace kuiper::op::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Two adjacent elements widened to fp32 (the pair is 8 or 4 bytes, loaded in one access).
__device__ __forceinline__ float2 load_pair(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load_pair(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// Two packed 16-bit values, loaded as one 32-bit word, widened to fp32 (the pointer type only
// names the format).
__device__ __forceinline__ float2 widen_pair(uint32_t bits, const __half*) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}
__device__ __forceinline__ float2 widen_pair(uint32_t bits, const __nv_bfloat16*) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}

// Whether `p` is a multiple of `bytes`: what a kernel's wide loads need of its data.
inline bool aligned_to(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Returns f(T{}) for the CUDA storage type T of `dtype` (f returns a Status).
template <typename F>
Status dispatch_float_type(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kFP32: return f(float{});
    case DataType::kFP16: return f(__half{});
    case DataType::kBF16: return f(__nv_bfloat16{});
    default: return unsupported("no cuda kernel for " + std::string(dtype_name(dtype)) + " data");
  }
}

}  // namespace kuiper::op::cuda
