// Decode-time matrix-vector product y[rows] = W[rows, cols] · x[cols] with fp32, fp16 or bf16
// weights. Decode is bound by reading W once from HBM, so the kernel is built around that:
// one warp per row, 16-byte loads that are coalesced across the warp, kUnroll of them issued
// before the first is used (16: each warp keeps 8 KB of weights in flight), streamed past L1
// so that x stays cached there, and fp32 partial sums reduced with warp shuffles.
#pragma once

#include <cstdint>

#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {

inline constexpr int kGemvWarps = 8;  // rows per block
inline constexpr int kGemvUnroll = 16;

// Dot product of 16 bytes of weights (8 halves or 4 floats) with the matching fp32 inputs.
__device__ __forceinline__ float dot16(const uint4& w, const float4* x, const __nv_bfloat16*) {
  const float4 x0 = __ldg(x), x1 = __ldg(x + 1);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
  const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.z));
  const float2 d = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.w));
  return a.x * x0.x + a.y * x0.y + b.x * x0.z + b.y * x0.w +
         c.x * x1.x + c.y * x1.y + d.x * x1.z + d.y * x1.w;
}

__device__ __forceinline__ float dot16(const uint4& w, const float4* x, const __half*) {
  const float4 x0 = __ldg(x), x1 = __ldg(x + 1);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
  const float2 c = __half22float2(*reinterpret_cast<const __half2*>(&w.z));
  const float2 d = __half22float2(*reinterpret_cast<const __half2*>(&w.w));
  return a.x * x0.x + a.y * x0.y + b.x * x0.z + b.y * x0.w +
         c.x * x1.x + c.y * x1.y + d.x * x1.z + d.y * x1.w;
}

__device__ __forceinline__ float dot16(const uint4& w, const float4* x, const float*) {
  const float4 x0 = __ldg(x);
  return __uint_as_float(w.x) * x0.x + __uint_as_float(w.y) * x0.y +
         __uint_as_float(w.z) * x0.z + __uint_as_float(w.w) * x0.w;
}

// kVector: rows start 16-byte aligned and cols is a multiple of 16 / sizeof(T); otherwise
// the scalar loop (still coalesced, slower) handles any shape.
template <typename T, bool kVector, int kUnroll = kGemvUnroll>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const T* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                int rows, int cols) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const T* wr = w + static_cast<int64_t>(row) * cols;
  float partial[kUnroll] = {};
  if constexpr (kVector) {
    constexpr int kElems = 16 / sizeof(T);
    const int chunks = cols / kElems;
    const uint4* wv = reinterpret_cast<const uint4*>(wr);
    const float4* xv = reinterpret_cast<const float4*>(x);
    for (int base = lane; base < chunks; base += 32 * kUnroll) {
      uint4 loaded[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = base + u * 32;
        if (c < chunks) loaded[u] = __ldcs(wv + c);  // read once: evict first
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = base + u * 32;
        if (c < chunks) partial[u] += dot16(loaded[u], xv + c * (kElems / 4), wr);
      }
    }
  } else {
    for (int c = lane; c < cols; c += 32) partial[0] += to_float(wr[c]) * x[c];
  }
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) sum += partial[u];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[row] = sum;
}

}  // namespace kuiper::op::cuda
