// The decode GEMV for rows short enough that one block reads a row in a single pass: fp32,
// fp16 or bf16 rows of at most kOnePassMaxChunks 16-byte chunks (8192 bf16 columns). A block
// takes kRows rows, and thread t reads chunk t of every one of them: all of a thread's loads
// are issued at once, before the wait for the kernel that writes x. The blocks are short-lived
// (a 4096-wide bf16 row is 8 KB) and several are resident on each multiprocessor, one reducing
// while the others' loads are in flight; this streams HBM better than the warp kernel, whose
// warps each walk a row in bursts. x is read once per block for all of its rows, and a norm's
// sums of squares come in the block's one reduction with the rows' sums: handed on, or summed
// from x itself, which the block reads whole. Its residual accumulate hands no norm on: that
// needs a whole run of 8 rows per block for the next norm's sums, which streams worse than the
// warp kernel (docs/performance.md).
#pragma once

#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_epilogues.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_rows.cuh"

namespace kuiper::op::cuda {

namespace {  // internal linkage: decode_gemv_args.cuh says why

template <typename T, int kRows, GemvEpilogue kEpi, InputNorm kNorm>
__global__ void __launch_bounds__(kOnePassMaxChunks)
    decode_gemv_one_pass_kernel(const DecodeGemvArgs a) {
  let_next_kernel_start();
  constexpr int kElems = kChunkElems<T>;
  int row[kRows];
  bool valid[kRows];
  warp_rows<kEpi, kRows, 1>(a, static_cast<int>(blockIdx.x), 0, row, valid);  // the block's rows, as one warp's
  const int chunks = a.cols / kElems, c = threadIdx.x;
  const bool reads = c < chunks;  // the last warp may have lanes past the row
  uint4 w[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    w[r] = reads ? __ldcs(static_cast<const uint4*>(a.w) + static_cast<int64_t>(row[r]) * chunks + c)
                 : uint4{};
  }
  wait_for_previous_kernel();  // x and the sums of squares are written by the previous kernel

  // Everything else the block reads is asked for now, before the first use of any of it, so
  // that it all arrives in one round trip: x, the input norm's sums of squares (there are at
  // most as many runs of 8 columns as threads; read after the dot products, as a loop, they
  // would be a second round trip) or its weights, and, for rope, the position and then its
  // angle (lane 0).
  constexpr bool kHasNorm = kNorm != InputNorm::kNone;
  float sumsq = 0.f;
  if (kNorm == InputNorm::kGivenSums && c < a.sumsq_runs) sumsq = load_after_wait(a.in_sumsq + c);
  RopePairs<kRows / 2> rope;
  if constexpr (kEpi == GemvEpilogue::kRopeKv) {
    if (c == 0) rope = load_rope_pairs(a, row);
  }

  // Sums, one per row and (with a norm) the sum of squares last, reduced over the block.
  constexpr int kSums = kRows + (kHasNorm ? 1 : 0);
  float s[kSums] = {};
  if (reads) {
    float4 x0 = input4(a.x, c * kElems);
    float4 x1 = kElems == 8 ? input4(a.x, c * kElems + 4) : x0;
    if constexpr (kNorm == InputNorm::kSummedHere) {
      // g is a weight, unchanged since the model was made: read through the read-only cache.
      const float4 g0 = __ldg(reinterpret_cast<const float4*>(a.in_norm_weight + c * kElems));
      const float4 g1 = kElems == 8 ? __ldg(reinterpret_cast<const float4*>(a.in_norm_weight + c * kElems + 4)) : g0;
      sumsq = squares(x0) + (kElems == 8 ? squares(x1) : 0.f);
      x0 = times(x0, g0);
      x1 = times(x1, g1);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = dot16(w[r], x0, x1, static_cast<const T*>(nullptr));
  }
  if constexpr (kHasNorm) s[kRows] = sumsq;
  __shared__ float warp_sums[kOnePassMaxChunks / 32][kSums];
  const int lane = c % 32, warp = c / 32;
#pragma unroll
  for (int k = 0; k < kSums; ++k) {
    const float v = warp_sum(s[k]);
    if (lane == 0) warp_sums[warp][k] = v;
  }
  __syncthreads();
  if (warp != 0) return;
  // Warp 0 adds the warps' sums, lane i taking warp i's (a thread walking them one after the
  // other kept the block a few hundred cycles longer); lane 0 writes the rows.
  const int warps = static_cast<int>(blockDim.x / 32);
  float y[kRows], total_sumsq = 0.f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) y[r] = warp_sum(lane < warps ? warp_sums[lane][r] : 0.f);
  if constexpr (kHasNorm) total_sumsq = warp_sum(lane < warps ? warp_sums[lane][kRows] : 0.f);
  if (lane != 0) return;
  if constexpr (kHasNorm) {
    const float inv_rms = inverse_rms(a, total_sumsq);
#pragma unroll
    for (int r = 0; r < kRows; ++r) y[r] *= inv_rms;
  }
  if constexpr (kEpi == GemvEpilogue::kRopeKv) {
    write_rope_pairs(a, row, valid, y, rope);
  } else {
    write_rows<kEpi>(a, row, valid, y);
  }
}

// One block per kRows rows (per kRows / 2 outputs for swiglu), one thread per chunk of a row.
template <typename T, int kRows, GemvEpilogue kEpi, InputNorm kNorm>
cudaError_t launch_decode_gemv_one_pass(const DecodeGemvArgs& a, cudaStream_t stream) {
  const int chunks = a.cols / kChunkElems<T>;
  const unsigned threads = static_cast<unsigned>((chunks + 31) / 32 * 32);
  return launch_overlapped(decode_gemv_one_pass_kernel<T, kRows, kEpi, kNorm>,
                           dim3(static_cast<unsigned>((a.rows + kRows - 1) / kRows)),
                           dim3(threads), 0, stream, a);
}

}  // namespace
}  // namespace kuiper::op::cuda
