// Decode-time matrix-vector product y[rows] = W[rows, cols] · x[cols] with fp32, fp16 or bf16
// weights. Decode is bound by reading W once from HBM, so the kernel is built around that:
// one warp per row, 16-byte loads coalesced across the warp, kGemvBurst of them per lane
// issued before the first is used (8 KB per warp, about 128 KB per multiprocessor: what the
// register file holds), weights read past L1 so that x stays cached there, fp32 sums reduced
// with warp shuffles.
//
// Measured on an H200 (tools/cuda_kernels_bench.cu), this beat two persistent designs that
// stream each warp's rows without pause, one double-buffering registers and one filling a
// per-warp shared-memory ring with cp.async: both reached only 45-65% of copy bandwidth on
// 4096-wide matrices against 70-92% here. Bursts of 8 loads instead of 16: 50-77%.
//
// Launched overlapped (launch.cuh), a block issues its first burst (for 4096-wide 16-bit rows,
// the whole row) before waiting for the kernel that writes x: the weight stream of one GEMV
// starts while the norm, attention combine, swiglu or GEMV before it is still finishing.
#pragma once

#include <cstdint>

#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
// Internal linkage: without relocatable device code every translation unit that includes this
// gets its own copy of each kernel, and shared host-side launch stubs would mix one unit's
// kernel registration with another's.
namespace {

inline constexpr int kGemvWarps = 8;   // rows per block
inline constexpr int kGemvBurst = 16;  // 16-byte loads per lane in flight: 8 KB per warp

// Dot product of 16 bytes of weights (8 halves or 4 floats) with the matching fp32 inputs,
// which the previous kernel wrote (hence not __ldg: launch.cuh).
// Two packed 16-bit weights widened to fp32.
__device__ __forceinline__ float2 widen2(uint32_t bits, const __nv_bfloat16*) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}
__device__ __forceinline__ float2 widen2(uint32_t bits, const __half*) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

template <typename Half>
__device__ __forceinline__ float dot16(const uint4& w, const float4* x, const Half* tag) {
  const float4 x0 = load_after_wait(x), x1 = load_after_wait(x + 1);
  const float2 a = widen2(w.x, tag), b = widen2(w.y, tag), c = widen2(w.z, tag), d = widen2(w.w, tag);
  return a.x * x0.x + a.y * x0.y + b.x * x0.z + b.y * x0.w +
         c.x * x1.x + c.y * x1.y + d.x * x1.z + d.y * x1.w;
}

__device__ __forceinline__ float dot16(const uint4& w, const float4* x, const float*) {
  const float4 x0 = load_after_wait(x);
  return __uint_as_float(w.x) * x0.x + __uint_as_float(w.y) * x0.y +
         __uint_as_float(w.z) * x0.z + __uint_as_float(w.w) * x0.w;
}

// Rows whose start is not 16-byte aligned, or whose length is not a multiple of 16 bytes:
// plain coalesced loads, one warp per row. Slower; no 7B-class model needs it.
template <typename T>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_scalar_kernel(const T* __restrict__ w, const float* __restrict__ x,
                       float* __restrict__ y, int rows, int cols) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const T* wr = w + static_cast<int64_t>(row) * cols;
  float sum = 0.f;
  for (int c = lane; c < cols; c += 32) sum += to_float(wr[c]) * x[c];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[row] = sum;
}

// One warp per row, kBurst 16-byte loads per lane issued before the first is used, then
// summed; rows longer than one burst take several. Many short-lived blocks: the scheduler
// starts a new one as soon as one finishes. Rows must start 16-byte aligned and hold a whole
// number of 16-byte chunks.
template <typename T, int kBurst>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_burst_kernel(const T* __restrict__ w, const float* x, float* __restrict__ y, int rows,
                      int cols) {
  constexpr int kElems = 16 / sizeof(T), kFloat4PerChunk = kElems / 4;
  let_next_kernel_start();
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  if (row >= rows) return;  // other warps of the grid wait for the previous kernel
  const int chunks = cols / kElems;
  const uint4* wr = reinterpret_cast<const uint4*>(w) + static_cast<int64_t>(row) * chunks;
  const float4* x16 = reinterpret_cast<const float4*>(x);
  float partial[kBurst] = {};
  for (int base = lane; base < chunks; base += 32 * kBurst) {
    uint4 loaded[kBurst];
#pragma unroll
    for (int u = 0; u < kBurst; ++u) {
      const int c = base + u * 32;
      if (c < chunks) loaded[u] = __ldcs(wr + c);  // read once: evict first, keep x cached
    }
    if (base == lane) wait_for_previous_kernel();  // x is written by the previous kernel
#pragma unroll
    for (int u = 0; u < kBurst; ++u) {
      const int c = base + u * 32;
      if (c < chunks) {
        partial[u] += dot16(loaded[u], x16 + c * kFloat4PerChunk, static_cast<const T*>(nullptr));
      }
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kBurst; ++u) sum += partial[u];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) y[row] = sum;
}

}  // namespace
}  // namespace kuiper::op::cuda
