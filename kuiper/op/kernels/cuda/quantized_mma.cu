// The tensor-core GEMM for int8 and int4 weights over a few dozen tokens (batched decode of 9-64
// sequences): each block stages a strip of W, dequantized to bf16 exactly as the dequantize
// kernels write it (matmul_int8.cu, matmul_int4.cu), and the tokens' x rounded to bf16, in
// shared memory, and multiplies them with WMMA fragments, so that W is read from memory once
// whatever the number of tokens. The multi-token GEMV (multi_token_gemv.cu) reads W once per 8
// tokens and multiplies on the CUDA cores, compute-bound past one tile of 8; dequantizing all of
// W to bf16 for cuBLAS moves ~5 bytes a weight.
//
// A block of kThreads computes kBlockRows outputs for every token, stepping through the columns
// kStepCols at a time. Each thread loads one chunk of 32 weights a step (one group at most),
// the next step's chunk being in flight while the block multiplies the current one. Matrices
// with too few row blocks to fill the GPU split their columns, each split writing partial sums
// that sum_splits_kernel adds in split order (no atomics: the result does not depend on timing).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"
#include "kuiper/op/kernels/cuda/tensor_core_ops.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kThreads = 128;     // four warps
constexpr int kBlockRows = 32;    // two fragments of 16 outputs
constexpr int kStepCols = 128;    // a thread's chunk is a quarter of a row's step
constexpr int kChunk = 32;        // weights a thread dequantizes per step
constexpr int kPadded = kStepCols + 8;  // staged row stride in bf16: rows 272 bytes apart, off the bank stride
// About four blocks per multiprocessor of an H100 or H200 (132): fewer row blocks split columns.
constexpr int kTargetBlocks = 512;
constexpr int kMinSplitSteps = 4;  // a split reads at least 512 columns

static_assert(kBlockRows * kStepCols == kThreads * kChunk, "one chunk per thread and step");

struct QuantizedMmaArgs {
  const uint8_t* w;       // int8 [rows, cols], or int4 [rows, cols / 2]
  const __half* scales;   // one per group (op/weight.h)
  const __half* mins;     // int4 with a minimum; else null
  int group_shift;        // log2(group size), at least log2(kChunk)
  const __nv_bfloat16* x; // [tokens, cols]
  float* out;             // [splits, tokens, rows]; with one split, the output
  int tokens, rows, cols;
  int split_steps;        // steps of kStepCols columns per split
};

// One thread's chunk of 32 weights as loaded: 32 int8 bytes or 16 bytes of int4, and its group's
// constants.
template <bool kInt4>
struct RawChunk {
  uint4 bytes[kInt4 ? 1 : 2];
  __half scale, min;
};

template <bool kInt4>
__device__ __forceinline__ void load_chunk(RawChunk<kInt4>& c, const QuantizedMmaArgs& a, int64_t first) {
  const auto* p = reinterpret_cast<const uint4*>(a.w + (kInt4 ? first / 2 : first));
  c.bytes[0] = __ldg(p);
  if constexpr (!kInt4) c.bytes[1] = __ldg(p + 1);
  const int64_t group = first >> a.group_shift;
  c.scale = a.scales[group];
  if constexpr (kInt4) c.min = a.mins != nullptr ? a.mins[group] : __float2half(0.f);
}

// The chunk's 32 weights in bf16 into dst (16-byte aligned), rounded as the dequantize kernels
// round them.
template <bool kInt4>
__device__ __forceinline__ void store_dequantized(const RawChunk<kInt4>& c, bool with_min, __nv_bfloat16* dst) {
  const float scale = __half2float(c.scale);
  alignas(16) __nv_bfloat162 pairs[kChunk / 2];
  if constexpr (kInt4) {
    const float min = __half2float(c.min);
    const auto* b = reinterpret_cast<const uint8_t*>(c.bytes);
#pragma unroll
    for (int k = 0; k < kChunk / 2; ++k) {
      pairs[k] = __floats2bfloat162_rn(int4_value(b[k] & 0x0F, scale, min, with_min),
                                       int4_value(b[k] >> 4, scale, min, with_min));
    }
  } else {
    const auto* b = reinterpret_cast<const int8_t*>(c.bytes);
#pragma unroll
    for (int k = 0; k < kChunk / 2; ++k) {
      pairs[k] = __floats2bfloat162_rn(static_cast<float>(b[2 * k]) * scale, static_cast<float>(b[2 * k + 1]) * scale);
    }
  }
#pragma unroll
  for (int k = 0; k < kChunk / 8; ++k) reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(pairs)[k];
}

// Warp w multiplies output fragment w % 2 with token fragments w / 2 and w / 2 + 2.
template <bool kInt4>
__global__ void __launch_bounds__(kThreads) quantized_mma_kernel(const QuantizedMmaArgs a) {
  namespace wmma = nvcuda::wmma;
  __shared__ alignas(128) __nv_bfloat16 xs[kQuantizedMmaMaxTokens][kPadded];
  __shared__ alignas(128) __nv_bfloat16 ws[kBlockRows][kPadded];
  __shared__ alignas(128) float sums[kQuantizedMmaMaxTokens][kBlockRows + 4];

  const int warp = threadIdx.x / 32;
  const int first_row = static_cast<int>(blockIdx.x) * kBlockRows;
  const int split = static_cast<int>(blockIdx.y);
  const int step_begin = split * a.split_steps;
  const int step_end = min(a.cols / kStepCols, step_begin + a.split_steps);
  const int padded_tokens = (a.tokens + 15) / 16 * 16;
  // Token rows past the last token, up to its fragment's end, multiply as zeros.
  for (int i = threadIdx.x; i < (padded_tokens - a.tokens) * kPadded; i += kThreads) {
    xs[a.tokens + i / kPadded][i % kPadded] = __float2bfloat16(0.f);
  }
  const int chunk_row = threadIdx.x / (kStepCols / kChunk), chunk_col = threadIdx.x % (kStepCols / kChunk) * kChunk;
  const int64_t chunk_first = static_cast<int64_t>(first_row + chunk_row) * a.cols + chunk_col;
  const bool with_min = a.mins != nullptr;
  const int out_fragment = warp % 2, token_fragment = warp / 2;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.f);
  wmma::fill_fragment(acc[1], 0.f);
  RawChunk<kInt4> chunk;
  if (step_begin < step_end) load_chunk(chunk, a, chunk_first + static_cast<int64_t>(step_begin) * kStepCols);
  for (int step = step_begin; step < step_end; ++step) {
    const int first_col = step * kStepCols;
    for (int i = threadIdx.x; i < a.tokens * (kStepCols / 8); i += kThreads) {
      const int t = i / (kStepCols / 8), c = i % (kStepCols / 8) * 8;
      copy_16_async(&xs[t][c], a.x + static_cast<int64_t>(t) * a.cols + first_col + c, true);
    }
    commit_async_copies();
    store_dequantized(chunk, with_min, &ws[chunk_row][chunk_col]);
    if (step + 1 < step_end) load_chunk(chunk, a, chunk_first + static_cast<int64_t>(step + 1) * kStepCols);
    wait_async_copies<0>();
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kStepCols; k += 16) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> w_fragment;
      wmma::load_matrix_sync(w_fragment, &ws[out_fragment * 16][k], kPadded);
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        const int tokens_from = (token_fragment + 2 * f) * 16;
        if (tokens_from < padded_tokens) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> x_fragment;
          wmma::load_matrix_sync(x_fragment, &xs[tokens_from][k], kPadded);
          wmma::mma_sync(acc[f], x_fragment, w_fragment, acc[f]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    const int tokens_from = (token_fragment + 2 * f) * 16;
    if (tokens_from < padded_tokens) {
      wmma::store_matrix_sync(&sums[tokens_from][out_fragment * 16], acc[f], kBlockRows + 4, wmma::mem_row_major);
    }
  }
  __syncthreads();
  float* out = a.out + static_cast<int64_t>(split) * a.tokens * a.rows;
  for (int i = threadIdx.x; i < a.tokens * kBlockRows; i += kThreads) {
    const int t = i / kBlockRows, r = i % kBlockRows;
    out[static_cast<int64_t>(t) * a.rows + first_row + r] = sums[t][r];
  }
}

// out[i] = Σ_s partials[s · n + i], in split order.
__global__ void sum_splits_kernel(const float* __restrict__ partials, float* __restrict__ out, int64_t n, int splits) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += partials[s * n + i];
    out[i] = sum;
  }
}

}  // namespace

bool quantized_mma_fits(int64_t tokens, const Weight& weight) {
  return tokens <= kQuantizedMmaMaxTokens && weight.rows() % kBlockRows == 0 && weight.cols() % kStepCols == 0 &&
         weight.group_size >= kChunk && chunk_group_shift(weight.group_size) >= 0 &&
         aligned_to(weight.values.raw_data(), 16);
}

Status quantized_mma(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  const int64_t rows = weight.rows(), cols = weight.cols(), tokens = in.numel() / cols;
  KUIPER_ASSIGN_OR_RETURN(const __nv_bfloat16* x, gemm_input_bf16(in, ctx));
  // Split the columns when the row blocks alone would leave the GPU idle; the partial sums go
  // where gemm_via_bf16 would dequantize W (the scratch holds at least W's bf16 copy, and the
  // splits are capped to fit in it).
  const int64_t row_blocks = rows / kBlockRows, steps = cols / kStepCols;
  int64_t splits = std::clamp<int64_t>((kTargetBlocks + row_blocks - 1) / row_blocks, 1,
                                       std::max<int64_t>(1, steps / kMinSplitSteps));
  splits = std::min(splits, std::max<int64_t>(1, cols / (2 * tokens)));
  const int64_t split_steps = (steps + splits - 1) / splits;
  splits = (steps + split_steps - 1) / split_steps;
  float* sums = out.data<float>();
  if (splits > 1) {
    KUIPER_ASSIGN_OR_RETURN(void* partials, ctx.scratch(ScratchUse::kDequantizedWeight,
                                                        static_cast<size_t>(splits * tokens * rows) * sizeof(float)));
    sums = static_cast<float*>(partials);
  }
  QuantizedMmaArgs a{};
  a.w = static_cast<const uint8_t*>(weight.values.raw_data());
  a.scales = weight.scales.data<__half>();
  a.mins = weight.mins.is_empty() ? nullptr : weight.mins.data<__half>();
  a.group_shift = chunk_group_shift(weight.group_size);
  a.x = x;
  a.out = sums;
  a.tokens = static_cast<int>(tokens);
  a.rows = static_cast<int>(rows);
  a.cols = static_cast<int>(cols);
  a.split_steps = static_cast<int>(split_steps);
  const cudaStream_t stream = as_cuda_stream(ctx.stream());
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits));
  if (weight.dtype() == DataType::kINT4) {
    quantized_mma_kernel<true><<<grid, kThreads, 0, stream>>>(a);
  } else {
    quantized_mma_kernel<false><<<grid, kThreads, 0, stream>>>(a);
  }
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("quantized mma");
  if (splits > 1) {
    const int64_t n = tokens * rows;
    sum_splits_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(sums, out.data<float>(), n,
                                                                                  static_cast<int>(splits));
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("quantized mma split sums");
  }
  return ok_status();
}

}  // namespace kuiper::op::cuda
