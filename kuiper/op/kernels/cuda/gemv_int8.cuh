// Decode-time matrix-vector product y[rows] = dequant(W)[rows, cols] · x[cols] for int8 weights
// with one fp32 scale per group of consecutive weights (op/int8_weight.h). Like the 16-bit GEMV
// (gemv.cuh) it is built around reading W once from HBM: 16-byte loads coalesced across the
// warp, a burst of them per lane issued before the first is used, read past L1 (__ldcs) so that
// x stays cached there, fp32 sums reduced with warp shuffles.
//
// What differs for int8: a 16-byte load holds 16 weights, which need 64 bytes of x. With one row
// per warp, x traffic through L1 is four times the weight traffic and becomes the limit; a warp
// therefore serves kRows rows, reading each x chunk once for all of them. The scales of a burst
// are loaded with it (one per 16 weights: a 16-weight chunk never straddles a group, given cols
// % 16 == 0 and a power-of-two group of at least 16, so the group index is a shift). Weights are
// widened without the slow int-to-float unit: a byte b, offset to b + 128, is placed in the
// mantissa of 2^23 (one byte permute) and 2^23 + 128 subtracted.
//
// Measured on an H200 (copy 4268 GB/s; bytes = int8 weights + fp32 scales, group 64), % of copy
// for 4096x4096 / 11008x4096 / 4096x11008 / 32000x4096:
//   1 row x 8 loads (the previous kernel's shape)  22 / 34 / 26 / 42
//   1 row x 16                                     23 / 26 / 29 / 29
//   2 rows x 8                                     39 / 45 / 46 / 62
//   4 rows x 4 (used)                              41 / 54 / 52 / 82
//   4 rows x 8 (243 registers)                     42 / 50 / 51 / 70
// What still limits it: about 55 instructions per 16 weights (three per weight to widen and
// multiply), and every warp loads, then computes, then exits, so on matrices of one wave
// (4096 rows: 1024 warps) the compute does not overlap the loads; 32000 rows (many waves) do.
#pragma once

#include <cstdint>

#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {
// Internal linkage: see gemv.cuh.
namespace {

inline constexpr int kGemvInt8Warps = 8;

// The signed byte kIndex of a word whose bytes were offset by 128, as an exact float.
template <int kIndex>
__device__ __forceinline__ float widen_biased_byte(uint32_t biased_word) {
  constexpr float kOffset = 8388608.f + 128.f;  // 2^23 + 128
  return __uint_as_float(__byte_perm(biased_word, 0x4B000000u, 0x7540u + kIndex)) - kOffset;
}

__device__ __forceinline__ float dot4_int8(uint32_t word, const float4& x) {
  const uint32_t biased = word ^ 0x80808080u;  // b -> b + 128 in every byte
  return widen_biased_byte<0>(biased) * x.x + widen_biased_byte<1>(biased) * x.y +
         widen_biased_byte<2>(biased) * x.z + widen_biased_byte<3>(biased) * x.w;
}

__device__ __forceinline__ float warp_sum_int8(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// kRows rows per warp, kBurst 16-byte chunks per row and lane loaded before any is used.
// Rows must start 16-byte aligned (cols % 16 == 0, aligned base), x too; group_shift is
// log2(group size).
template <int kRows, int kBurst>
__global__ void __launch_bounds__(kGemvInt8Warps * 32)
    gemv_int8_kernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                     const float* x, float* __restrict__ y, int rows, int cols,
                     int group_shift) {
  let_next_kernel_start();
  const int lane = threadIdx.x % 32;
  const int first_row = (blockIdx.x * kGemvInt8Warps + threadIdx.x / 32) * kRows;
  if (first_row >= rows) return;  // other warps of the grid wait for the previous kernel
  const int chunks = cols / 16;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const uint4* w[kRows];
  int64_t flat[kRows];  // index of the row's first weight, for the scale lookup
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // A warp's rows past the end re-read the last row (valid memory); their sums are dropped.
    flat[r] = static_cast<int64_t>(min(first_row + r, rows - 1)) * cols;
    w[r] = reinterpret_cast<const uint4*>(q + flat[r]);
  }
  float sum[kRows] = {};
  for (int base = lane; base < chunks; base += 32 * kBurst) {
    uint4 loaded[kRows][kBurst];
    float scale[kRows][kBurst];
#pragma unroll
    for (int u = 0; u < kBurst; ++u) {
      const int c = base + u * 32;
      if (c < chunks) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          loaded[r][u] = __ldcs(w[r] + c);
          scale[r][u] = __ldcs(scales + ((flat[r] + c * 16) >> group_shift));
        }
      }
    }
    // Launched overlapped (launch.cuh): the first burst of weights is in flight before x,
    // which the previous kernel writes, may be read (and is not read with __ldg).
    if (base == lane) wait_for_previous_kernel();
#pragma unroll
    for (int u = 0; u < kBurst; ++u) {
      const int c = base + u * 32;
      if (c < chunks) {
        const float4 x0 = load_after_wait(x4 + c * 4), x1 = load_after_wait(x4 + c * 4 + 1);
        const float4 x2 = load_after_wait(x4 + c * 4 + 2), x3 = load_after_wait(x4 + c * 4 + 3);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint4& v = loaded[r][u];
          sum[r] += scale[r][u] * (dot4_int8(v.x, x0) + dot4_int8(v.y, x1) +
                                   dot4_int8(v.z, x2) + dot4_int8(v.w, x3));
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float total = warp_sum_int8(sum[r]);
    if (lane == 0 && first_row + r < rows) y[first_row + r] = total;
  }
}

}  // namespace
}  // namespace kuiper::op::cuda
