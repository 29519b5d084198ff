// Decode-time matrix-vector product y[rows] = W[rows, cols] · x[cols] with fp32, fp16 or bf16
// weights. Decode is bound by reading W once from HBM, so the kernel is built around that:
// 16-byte loads coalesced across each warp, two batches of kUnroll loads per lane in flight
// (8 KB per warp), a persistent grid whose warps stream rows back to back, weights read past
// L1 so that x stays cached there, fp32 sums reduced with warp shuffles.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {

inline constexpr int kGemvWarps = 8;  // rows per block
inline constexpr int kGemvUnroll = 8;  // loads per lane per buffer; two buffers

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

// The weight stream of one warp is cut into batches of kUnroll 16-byte loads per lane
// (32 * kUnroll chunks of a row). A batch's loads are issued before the previous batch is
// used, so the warp never waits a full memory round trip between batches, also across rows.
template <typename T, int kUnroll>
__device__ __forceinline__ void load_batch(uint4 (&dst)[kUnroll], const uint4* row, int first,
                                           int chunks) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = first + u * 32;
    if (c < chunks) dst[u] = __ldcs(row + c);  // read once: evict first, keep x in cache
  }
}

template <typename T, int kUnroll>
__device__ __forceinline__ float dot_batch(const uint4 (&w)[kUnroll], const float4* x, int first,
                                           int chunks) {
  constexpr int kFloat4PerChunk = 16 / sizeof(T) / 4;
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = first + u * 32;
    if (c < chunks) sum += dot16(w[u], x + c * kFloat4PerChunk, static_cast<const T*>(nullptr));
  }
  return sum;
}

// Where a warp is in its weight stream: a row and a batch within it.
struct GemvCursor {
  int row, batch;
};

// Rows start 16-byte aligned and hold a whole number of 16-byte chunks. The grid is sized to
// the number of blocks that fit on the GPU at once (gemv_stream_blocks); each warp then walks
// rows warp, warp + all warps, ... so that every warp streams without pause until the matrix
// is done, instead of paying a round trip per short-lived block. Two register buffers take
// turns (a copy between them would wait for the loads): while one batch is summed, the next
// is on its way.
template <typename T, int kUnroll = kGemvUnroll>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_stream_kernel(const T* __restrict__ w, const float* __restrict__ x,
                       float* __restrict__ y, int rows, int cols) {
  constexpr int kElems = 16 / sizeof(T);
  const int lane = threadIdx.x % 32;
  const int chunks = cols / kElems, per_batch = 32 * kUnroll;
  const int batches = (chunks + per_batch - 1) / per_batch;
  const int all_warps = gridDim.x * kGemvWarps;
  const GemvCursor first{static_cast<int>(blockIdx.x) * kGemvWarps + static_cast<int>(threadIdx.x) / 32, 0};
  if (first.row >= rows || batches == 0) return;
  const uint4* w16 = reinterpret_cast<const uint4*>(w);
  const float4* x16 = reinterpret_cast<const float4*>(x);
  const auto advance = [&](GemvCursor c) {
    return c.batch + 1 < batches ? GemvCursor{c.row, c.batch + 1}
                                 : GemvCursor{c.row + all_warps, 0};
  };
  const auto load = [&](uint4 (&dst)[kUnroll], GemvCursor c) {
    load_batch<T>(dst, w16 + static_cast<int64_t>(c.row) * chunks, c.batch * per_batch + lane,
                  chunks);
  };
  float sum = 0.f;
  // Adds a loaded batch; at a row's last batch, reduces across the warp and writes.
  const auto consume = [&](const uint4 (&src)[kUnroll], GemvCursor c) {
    sum += dot_batch<T>(src, x16, c.batch * per_batch + lane, chunks);
    if (c.batch + 1 == batches) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      }
      if (lane == 0) y[c.row] = sum;
      sum = 0.f;
    }
  };
  uint4 even[kUnroll], odd[kUnroll];
  GemvCursor at = first;
  load(even, at);
  for (;;) {
    const GemvCursor next = advance(at);
    if (next.row < rows) load(odd, next);
    consume(even, at);
    if (next.row >= rows) break;
    const GemvCursor after = advance(next);
    if (after.row < rows) load(even, after);
    consume(odd, next);
    if (after.row >= rows) break;
    at = after;
  }
}

// Blocks of gemv_stream_kernel<T, kUnroll> that fit on the GPU at once: its grid. Asked of
// the driver once (all GPUs of a process are assumed alike), so later calls, including those
// inside a graph capture, make no driver call.
template <typename T, int kUnroll = kGemvUnroll>
StatusOr<int> gemv_stream_blocks() {
  static std::atomic<int> known{0};
  if (const int blocks = known.load(); blocks > 0) return blocks;
  int device = 0, sms = 0, per_sm = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  KUIPER_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  KUIPER_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, gemv_stream_kernel<T, kUnroll>, kGemvWarps * 32, 0));
  const int blocks = std::max(1, sms * per_sm);
  known.store(blocks);
  return blocks;
}

}  // namespace kuiper::op::cuda
