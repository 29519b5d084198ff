// The decode GEMV's warp kernel: any shape, rows read by a row reader (decode_gemv_rows.cuh),
// a block of kDecodeWarps warps each walking its rows' columns in bursts. Warps that issued
// one long burst, waited and multiplied all waited and then all multiplied at once, leaving HBM
// idle in between; so every warp keeps two short bursts in flight instead. Launched overlapped
// (launch.cuh), a block issues its first two bursts before waiting for the kernel that writes
// x, so the weight stream of one GEMV starts while the kernel before it is still finishing;
// a reader that multiplies with a prepared form of x (StagesInput) has the block prepare it
// right after that wait, while those bursts arrive.
// A multi-token reader (kTokens > 1) multiplies each weight load with kTokens tokens' x; a.tokens
// tokens take ceil(a.tokens / kTokens) token tiles of blocks, the tiles of one row block
// adjacent in the grid, so that they run together and the later tiles may find the weights
// still in L2.
#pragma once

#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_epilogues.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_rows.cuh"

namespace kuiper::op::cuda {
namespace {  // internal linkage: decode_gemv_args.cuh says why

// Readers that multiply with a form of x the block prepares first (Int4Int8Chunks: x quantized
// to int8) provide stage_input(a), which the whole block runs once x is written, into dynamic
// shared memory of staged_input_bytes(a).
template <typename Rows>
concept StagesInput = requires(const DecodeGemvArgs& a) { Rows::staged_input_bytes(a); };

template <typename Rows>
size_t staged_input_bytes(const DecodeGemvArgs& a) {
  if constexpr (StagesInput<Rows>) {
    return Rows::staged_input_bytes(a);
  } else {
    return 0;
  }
}

// Token tiles of blocks for a.tokens tokens, kTokens per tile (one for one-token readers).
template <typename Rows>
__host__ __device__ int token_tiles(const DecodeGemvArgs& a) {
  if constexpr (Rows::kTokens == 1) {
    return 1;
  } else {
    return (a.tokens + Rows::kTokens - 1) / Rows::kTokens;
  }
}

// One-token readers are made from their rows, multi-token ones also from their first token.
template <typename Rows, int kRows>
__device__ __forceinline__ Rows make_rows(const DecodeGemvArgs& a, const int (&row)[kRows], int first_token) {
  if constexpr (Rows::kTokens == 1) {
    return Rows(a, row);
  } else {
    return Rows(a, row, first_token);
  }
}

// Each warp keeps two bursts of loads in flight: while one is multiplied, the next is on its
// way, and the burst after it is requested as soon as a buffer is free. The first two are
// issued before the wait for the previous kernel. Where Rows splits columns (SplitColumns), a
// warp reads its part of its rows' columns, and the first part's warp adds the others' sums
// and writes the rows.
template <typename Rows, GemvEpilogue kEpi, bool kNorm>
__global__ void __launch_bounds__(kDecodeWarps * 32, Rows::kMinBlocks)
    decode_gemv_kernel(const DecodeGemvArgs a) {
  let_next_kernel_start();
  constexpr int kRows = Rows::kRows, kStep = 32 * Rows::kBurst, kTokens = Rows::kTokens;
  constexpr int kParts = Rows::kColumnParts, kRowWarps = kDecodeWarps / kParts;
  static_assert(kTokens == 1 || (kEpi == GemvEpilogue::kStore && !kNorm),
                "several tokens are only stored: the fused epilogues serve one-token decode");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row_warp = warp % kRowWarps, part = warp / kRowWarps;
  const int tiles = token_tiles<Rows>(a), block = static_cast<int>(blockIdx.x) / tiles;
  const int first_token = static_cast<int>(blockIdx.x) % tiles * kTokens;
  int row[kRows];
  bool valid[kRows];
  warp_rows<kEpi, kRows, kRowWarps>(a, block, row_warp, row, valid);
  const Rows rows = make_rows<Rows>(a, row, first_token);
  const int units = rows.units(a), part_units = (units + kParts - 1) / kParts;
  const int begin = part * part_units, end = min(units, begin + part_units);
  typename Rows::Sums sums;
  typename Rows::Loaded even, odd;
  rows.load(even, begin + lane, end, a);
  rows.load(odd, begin + kStep + lane, end, a);
  wait_for_previous_kernel();  // x is written by the previous kernel
  __shared__ InputNormSums norm;
  if constexpr (kNorm) norm.stage(a);
  if constexpr (StagesInput<Rows>) Rows::stage_input(a);
  if constexpr (kNorm || StagesInput<Rows>) __syncthreads();
  for (int start = begin; start < end; start += 2 * kStep) {
    rows.accumulate(sums, even, start + lane, end, a);
    rows.load(even, start + 2 * kStep + lane, end, a);
    if (start + kStep >= end) break;
    rows.accumulate(sums, odd, start + kStep + lane, end, a);
    rows.load(odd, start + 3 * kStep + lane, end, a);
  }
  float y[kTokens][kRows];
  rows.finish(sums, y);
  if constexpr (kParts > 1) {  // the other parts' sums, added in part order
    __shared__ float part_sums[kParts - 1][kRowWarps][kTokens][kRows];
    if (part > 0 && lane == 0) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) part_sums[part - 1][row_warp][t][r] = y[t][r];
      }
    }
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int p = 0; p < kParts - 1; ++p) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) y[t][r] += part_sums[p][row_warp][t][r];
        }
      }
    }
  }
  if constexpr (kTokens == 1) {
    finish_rows<kEpi, kNorm, kRows, kRowWarps>(a, row_warp, lane, part == 0, row, valid, y[0], norm);
  } else if (lane == 0 && part == 0) {
    write_token_rows(a, first_token, row, valid, y);
  }
}

// The rows one block of Rows reads: kRows rows per warp, kColumnParts warps per row.
template <typename Rows>
constexpr int decode_gemv_block_rows() {
  return kDecodeWarps / Rows::kColumnParts * Rows::kRows;
}

// Blocks for a grid of `a` read as Rows reads it. Swiglu needs as many: its warps read as many
// rows, and write half as many outputs. Multi-token readers take token_tiles such grids.
template <typename Rows>
unsigned decode_gemv_blocks(const DecodeGemvArgs& a) {
  constexpr int kBlockRows = decode_gemv_block_rows<Rows>();
  return static_cast<unsigned>((a.rows + kBlockRows - 1) / kBlockRows * token_tiles<Rows>(a));
}

template <typename Rows, GemvEpilogue kEpi, bool kNorm>
cudaError_t launch_decode_gemv(const DecodeGemvArgs& a, cudaStream_t stream) {
  return launch_overlapped(decode_gemv_kernel<Rows, kEpi, kNorm>,
                           dim3(decode_gemv_blocks<Rows>(a)),
                           dim3(kDecodeWarps * 32), staged_input_bytes<Rows>(a), stream, a);
}

}  // namespace
}  // namespace kuiper::op::cuda
