// Decode-time matrix-vector product y[rows] = W[rows, cols] · x[cols] with fp32, fp16 or bf16
// weights. Decode is bound by reading W once from HBM, so the kernel is built around that:
// 16-byte asynchronous copies coalesced across each warp into a per-warp shared-memory ring
// (14 KB per warp in flight: far more than registers could hold), a persistent grid whose
// warps stream rows back to back, weights read past L1 so that x stays cached there, fp32 sums
// reduced with warp shuffles.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {
// Internal linkage: without relocatable device code every translation unit that includes this
// gets its own copy of each kernel, and shared host-side symbols (launch stubs, the cached
// launch configuration) would mix one unit's attributes with another's kernel.
namespace {

inline constexpr int kGemvWarps = 4;   // warps per block
inline constexpr int kGemvUnroll = 4;  // 16-byte chunks per lane per batch (2 KB per warp)
inline constexpr int kGemvStages = 8;
inline constexpr int kGemvBurstWarps = 8;  // rows per block of the burst kernel
inline constexpr int kGemvBurst = 16;      // 16-byte loads per lane in flight: 8 KB per warp  // batches per warp ring: 16 KB, 14 KB of it in flight

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

// One warp per row, kBurst 16-byte loads per lane issued before the first is used (8 KB per
// warp for kBurst 16), then summed; rows longer than one burst take several. Many short-lived
// blocks: the scheduler starts a new one as soon as one finishes. Rows must start 16-byte
// aligned and hold a whole number of 16-byte chunks.
template <typename T, int kBurst>
__global__ void __launch_bounds__(kGemvBurstWarps * 32)
    gemv_burst_kernel(const T* __restrict__ w, const float* __restrict__ x,
                      float* __restrict__ y, int rows, int cols) {
  constexpr int kElems = 16 / sizeof(T), kFloat4PerChunk = kElems / 4;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kGemvBurstWarps + threadIdx.x / 32;
  if (row >= rows) return;
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

// Where a warp is in its weight stream: a row, and a batch of 32 * kUnroll 16-byte chunks of it.
struct GemvCursor {
  int row, batch;
};

__device__ __forceinline__ void copy16_async(void* shared_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  // .cg: through L2 only, so the weights do not evict x from L1.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src));
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Each warp streams its rows (row = warp, warp + all warps, ...) through a private ring of
// kStages batches in shared memory, filled by asynchronous copies kStages - 1 batches ahead of
// the batch being summed. Each lane copies and later reads only its own 16-byte slots, so the
// lanes never wait for one another until the row's shuffle reduction. Rows must start 16-byte
// aligned and hold a whole number of 16-byte chunks. The grid is what fits on the GPU at once
// (gemv_async_config), so every warp streams without pause until the matrix is done.
template <typename T, int kStages, int kUnroll>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_async_kernel(const T* __restrict__ w, const float* __restrict__ x,
                      float* __restrict__ y, int rows, int cols) {
  constexpr int kElems = 16 / sizeof(T), kFloat4PerChunk = kElems / 4;
  extern __shared__ uint4 ring_s[];  // [warps][kStages][kUnroll][32]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint4* ring = ring_s + warp * kStages * kUnroll * 32;
  const int chunks = cols / kElems, per_batch = 32 * kUnroll;
  const int batches = (chunks + per_batch - 1) / per_batch;
  const int all_warps = gridDim.x * kGemvWarps;
  const GemvCursor first{static_cast<int>(blockIdx.x) * kGemvWarps + warp, 0};
  if (first.row >= rows || batches == 0) return;
  const uint4* w16 = reinterpret_cast<const uint4*>(w);
  const float4* x16 = reinterpret_cast<const float4*>(x);
  const auto advance = [&](GemvCursor c) {
    return c.batch + 1 < batches ? GemvCursor{c.row, c.batch + 1}
                                 : GemvCursor{c.row + all_warps, 0};
  };
  // Queues the copies of batch `c` into ring slot `slot`, or nothing past the last row; a
  // group is committed either way, so that "all but the newest kStages - 1 groups" always
  // means "up to the batch about to be summed".
  const auto issue = [&](GemvCursor c, int slot) {
    if (c.row < rows) {
      const uint4* src = w16 + static_cast<int64_t>(c.row) * chunks;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int chunk = c.batch * per_batch + u * 32 + lane;
        if (chunk < chunks) copy16_async(ring + (slot * kUnroll + u) * 32 + lane, src + chunk);
      }
    }
    commit_async();
  };

  GemvCursor ahead = first;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    issue(ahead, s);
    ahead = advance(ahead);
  }
  float sum = 0.f;
  int slot = 0;
  for (GemvCursor at = first; at.row < rows; at = advance(at)) {
    issue(ahead, slot == 0 ? kStages - 1 : slot - 1);  // the slot summed last time round
    ahead = advance(ahead);
    wait_async<kStages - 1>();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int chunk = at.batch * per_batch + u * 32 + lane;
      if (chunk < chunks) {
        sum += dot16(ring[(slot * kUnroll + u) * 32 + lane], x16 + chunk * kFloat4PerChunk,
                     static_cast<const T*>(nullptr));
      }
    }
    if (at.batch + 1 == batches) {  // row finished
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      }
      if (lane == 0) y[at.row] = sum;
      sum = 0.f;
    }
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }
  wait_async<0>();  // leave no copy in flight into memory the next block may own
}

struct GemvLaunch {
  int blocks;          // resident blocks on the whole GPU
  size_t shared_bytes;
};

// The launch of gemv_async_kernel<T, kStages, kUnroll>: its ring's shared memory (raised past
// the 48 KB default once) and as many blocks as fit on the GPU at once. Asked of the driver
// once (all GPUs of a process are assumed alike), so later calls, including those inside a
// graph capture, make no driver call.
template <typename T, int kStages = kGemvStages, int kUnroll = kGemvUnroll>
StatusOr<GemvLaunch> gemv_async_config() {
  static std::atomic<int> known_blocks{0};
  constexpr size_t kShared = size_t{kGemvWarps} * kStages * kUnroll * 32 * 16;
  if (const int blocks = known_blocks.load(); blocks > 0) return GemvLaunch{blocks, kShared};
  const auto kernel = gemv_async_kernel<T, kStages, kUnroll>;
  int device = 0, sms = 0, per_sm = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  KUIPER_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  KUIPER_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared));
  // Ask for the largest shared-memory carveout, or the driver may pick one that fits fewer
  // blocks than the occupancy query assumes, and the persistent grid would run in waves.
  KUIPER_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  KUIPER_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvWarps * 32, kShared));
  if (per_sm == 0) return internal_error("gemv kernel does not fit on this GPU");
  known_blocks.store(sms * per_sm);
  return GemvLaunch{sms * per_sm, kShared};
}

}  // namespace
}  // namespace kuiper::op::cuda
