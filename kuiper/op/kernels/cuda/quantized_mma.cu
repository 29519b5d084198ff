// The tensor-core GEMM for int8 and int4 weights over a few dozen tokens (batched decode of 9-64
// sequences): W is read from memory once whatever the number of tokens, dequantized in registers
// straight into mma.sync fragments. The multi-token GEMV (multi_token_gemv.cu) reads W once per 8
// tokens and multiplies on the CUDA cores, compute-bound past one tile of 8; dequantizing all of
// W to bf16 for cuBLAS moves ~5 bytes a weight.
//
// A block of four warps computes 128 rows (32 a warp, two m16 tiles) for every token (up to
// eight n8 tiles), stepping through 64 bytes of each row at a time: 64 int8 or 128 int4 weights.
// Lane (g, t) = (lane / 4, lane % 4) owns 16 bytes of each of its rows g, g + 8, g + 16, g + 24 in
// a step. The mma's k index runs over the columns in an order of our choosing, the same for both
// operands: the fragment slots 2t, 2t + 1, 2t + 8, 2t + 9 a lane holds for one k16 step are four
// consecutive columns of its own 16 bytes. So each lane dequantizes its weights into its A
// fragments without exchanging them, and reads the tokens' x for the same columns as 16-byte
// words of shared memory. The weights, their scales and x arrive by cp.async, several steps in
// flight. Rows of x in shared memory are padded so that a warp's 16-byte reads hit distinct banks.
//
// A weight is dequantized exactly as the dequantize kernels write it (matmul_int8.cu,
// matmul_int4.cu), x is rounded to bf16 once (gemm_input_bf16), and the sums are fp32. Symmetric
// int4 weights are converted two at a time by packed bf16 operations, which pair columns c and
// c + 4 of a word; their x is rounded with each 8 columns interleaved to match. Matrices
// with too few row blocks to fill the GPU split their columns, each split writing partial sums
// that sum_splits_kernel adds in split order (no atomics: the result does not depend on timing).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_backend.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_args.cuh"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"
#include "kuiper/op/kernels/cuda/quantized_fragments.cuh"
#include "kuiper/op/kernels/cuda/tensor_core_ops.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpRows = 32;                   // two m16 tiles
constexpr int kBlockRows = kWarps * kWarpRows;
constexpr int kLaneRows = 4;                    // g, g + 8, g + 16, g + 24 of its warp's rows
constexpr int kRowStepBytes = 64;               // of each row, per step: 16 a lane
constexpr int kMinSplitCols = 512;              // fewer columns a split would cost more in partial sums
// Blocks resident on a multiprocessor together (the launch bounds; the splits aim at filling
// them): a warp's dequantizing is a chain of dependent operations, and only other warps hide its
// latency, so three blocks with shallower pipelines beat two with deeper ones.
constexpr int kBlocksPerMultiprocessor = 3;
constexpr int kSharedBudget = 72 * 1024;  // bytes of pipeline stages a block, for three to fit

// What a byte of W holds: the kernel is compiled for each.
enum class WeightCode { kInt8, kInt4Symmetric, kInt4WithMin };

template <bool kInt4>
struct StepShape {
  static constexpr int kCols = kInt4 ? 2 * kRowStepBytes : kRowStepBytes;
  static constexpr int kLaneCols = kCols / 4;     // a lane's 16 bytes
  static constexpr int kLaneWords = kLaneCols / 8;  // 16-byte words of x a lane reads per token
  // One 16-byte word of padding per 128 bytes of x: with it, the eight lanes of a quarter warp
  // (g of two consecutive values, t of four) read eight distinct banks' words; int4 lanes also
  // take their words in the order lane_word() gives.
  static constexpr int kXStride = kCols + kCols / 8;  // bf16
};

// The aligned fp16 pairs that hold the rows' minimums in a stage (int4 with a minimum only:
// the others' stages leave them out, which lets symmetric int4 over 33-48 tokens keep three
// stages in flight rather than two).
struct StageMins {
  uint32_t mins[kLaneRows][kThreads];
};
struct NoStageMins {};

// One step of the pipeline: the lanes' weight bytes and the aligned fp16 pairs that hold their
// rows' scales (and minimums), each read back only by the lane that copied it, and the tokens'
// x for the step's columns, read by every warp.
template <WeightCode kCode, int kTokenTiles>
struct Stage : std::conditional_t<kCode == WeightCode::kInt4WithMin, StageMins, NoStageMins> {
  uint4 w[kLaneRows][kThreads];
  uint32_t scales[kLaneRows][kThreads];
  __nv_bfloat16 x[8 * kTokenTiles][StepShape<kCode != WeightCode::kInt8>::kXStride];
};

template <WeightCode kCode, int kTokenTiles>
constexpr int kStages = std::clamp<int>(kSharedBudget / sizeof(Stage<kCode, kTokenTiles>), 2, 4);

template <WeightCode kCode, int kTokenTiles>
constexpr size_t kSharedBytes = kStages<kCode, kTokenTiles> * sizeof(Stage<kCode, kTokenTiles>);
static_assert(sizeof(Stage<WeightCode::kInt4WithMin, 6>) ==
                  sizeof(Stage<WeightCode::kInt4Symmetric, 6>) + sizeof(StageMins) &&
              kStages<WeightCode::kInt4Symmetric, 6> == 3, "a symmetric int4 stage holds no minimums");

struct QuantizedMmaArgs {
  const uint8_t* w;       // int8 [rows, cols], or int4 [rows, cols / 2]
  const __half* scales;   // one per group (op/weight.h)
  const __half* mins;     // int4 with a minimum; else null
  int group_shift;        // log2(group size), at least log2 of a lane's columns
  const __nv_bfloat16* x; // [tokens, cols]
  float* out;             // [splits, tokens, rows]; with one split, the output
  int tokens, rows, cols;
  int split_steps;        // steps per split
};

__device__ __forceinline__ uint32_t word_of(const uint4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// Which of its 16-byte words of x (8 columns) a lane reads at position `i`: int4 lanes t = 2, 3
// swap neighbours, so that within a quarter warp no two lanes' words share banks.
template <bool kInt4>
__device__ __forceinline__ int lane_word(int i, int t) {
  return kInt4 ? i ^ (t >> 1) : i;
}

// Element `index` % 2 of an aligned pair of fp16 values.
__device__ __forceinline__ float half_of(uint32_t pair, int64_t index) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(index & 1 ? pair >> 16 : pair & 0xFFFFu)));
}

template <WeightCode kCode, int kTokenTiles>
__global__ void __launch_bounds__(kThreads, kBlocksPerMultiprocessor) quantized_mma_kernel(const QuantizedMmaArgs a) {
  constexpr bool kInt4 = kCode != WeightCode::kInt8, kWithMin = kCode == WeightCode::kInt4WithMin;
  using Shape = StepShape<kInt4>;
  using StageT = Stage<kCode, kTokenTiles>;
  constexpr int stages = kStages<kCode, kTokenTiles>;
  extern __shared__ uint4 shared_words[];
  StageT* stage = reinterpret_cast<StageT*>(shared_words);

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4, tid = static_cast<int>(threadIdx.x);
  const int warp_row = static_cast<int>(blockIdx.x) * kBlockRows + warp * kWarpRows;
  const bool warp_active = warp_row < a.rows;  // rows are a multiple of kWarpRows
  const int first_step = static_cast<int>(blockIdx.y) * a.split_steps;
  const int steps = min(a.cols / Shape::kCols - first_step, a.split_steps);

  // Token rows past the last, up to the last tile's end, multiply as zeros; no copy writes them.
  for (int s = 0; s < stages; ++s) {
    for (int i = tid; i < (8 * kTokenTiles - a.tokens) * Shape::kXStride; i += kThreads) {
      stage[s].x[a.tokens + i / Shape::kXStride][i % Shape::kXStride] = __float2bfloat16(0.f);
    }
  }

  // The flat index of the first weight of the lane's 16 bytes of row i in step 0 of the split.
  int64_t lane_first[kLaneRows];
#pragma unroll
  for (int i = 0; i < kLaneRows; ++i) {
    lane_first[i] = static_cast<int64_t>(warp_row + g + 8 * i) * a.cols +
                    static_cast<int64_t>(first_step) * Shape::kCols + t * Shape::kLaneCols;
  }
  const auto queue_step = [&](int step, StageT& st) {
    const int64_t col = static_cast<int64_t>(first_step + step) * Shape::kCols;
    if (warp_active) {
#pragma unroll
      for (int i = 0; i < kLaneRows; ++i) {
        const int64_t first = lane_first[i] + static_cast<int64_t>(step) * Shape::kCols;
        copy_16_async(&st.w[i][tid], a.w + (kInt4 ? first / 2 : first), true);
        const int64_t group = first >> a.group_shift;
        copy_4_async(&st.scales[i][tid], a.scales + (group & ~int64_t{1}));
        if constexpr (kWithMin) copy_4_async(&st.mins[i][tid], a.mins + (group & ~int64_t{1}));
      }
    }
    constexpr int kWordsPerToken = Shape::kCols / 8;
    for (int i = tid; i < a.tokens * kWordsPerToken; i += kThreads) {
      const int token = i / kWordsPerToken, word = i % kWordsPerToken;
      copy_16_async(&st.x[token][8 * word], a.x + static_cast<int64_t>(token) * a.cols + col + 8 * word, true);
    }
  };

  float acc[2][kTokenTiles][4] = {};
#pragma unroll
  for (int s = 0; s < stages - 1; ++s) {
    if (s < steps) queue_step(s, stage[s]);
    commit_async_copies();
  }
  for (int step = 0; step < steps; ++step) {
    wait_async_copies<stages - 2>();
    // The step's x is in for every warp, and every warp is done with the stage refilled next.
    __syncthreads();
    if (step + stages - 1 < steps) queue_step(step + stages - 1, stage[(step + stages - 1) % stages]);
    commit_async_copies();
    if (!warp_active) continue;

    const StageT& st = stage[step % stages];
    uint4 w[kLaneRows];
    // Each row's scale (int4 with a minimum: times 16^-k for nibble k of a 16-bit half), or its
    // bf16 parts (symmetric int4).
    float scaled[kLaneRows][4], min[kLaneRows];
    SplitScale split[kLaneRows];
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) {
      const int64_t group = (lane_first[i] + static_cast<int64_t>(step) * Shape::kCols) >> a.group_shift;
      w[i] = st.w[i][tid];
      scaled[i][0] = half_of(st.scales[i][tid], group);
      if constexpr (kCode == WeightCode::kInt4Symmetric) split[i] = split_scale(scaled[i][0]);
#pragma unroll
      for (int k = 1; k < 4; ++k) scaled[i][k] = scaled[i][k - 1] * (1.f / 16.f);
      if constexpr (kWithMin) {
        min[i] = half_of(st.mins[i][tid], group);
      } else {
        min[i] = 0.f;
      }
    }
#pragma unroll
    for (int p = 0; p < Shape::kLaneWords; ++p) {
      const int x_word = lane_word<kInt4>(p, t);
      // A fragments of the two k16 steps this word of x feeds: [k step][m tile][register].
      uint32_t frag[2][2][4];
#pragma unroll
      for (int i = 0; i < kLaneRows; ++i) {
        const int m = i / 2, r = i % 2;  // rows g and g + 8 of m tile m
        // The word lane_word picks, with the indices known at compile time.
        const uint32_t word = kInt4 && (t >> 1) ? word_of(w[i], p ^ 1) : word_of(w[i], p);
        if constexpr (kCode == WeightCode::kInt4Symmetric) {
          uint32_t pairs[4];
          dequantize_int4_symmetric(word, split[i], pairs);
          frag[0][m][r] = pairs[0];
          frag[0][m][r + 2] = pairs[1];
          frag[1][m][r] = pairs[2];
          frag[1][m][r + 2] = pairs[3];
        } else if constexpr (kWithMin) {
          dequantize_int4_with_min(word, scaled[i], min[i], frag[0][m][r], frag[0][m][r + 2]);
          dequantize_int4_with_min(word >> 16, scaled[i], min[i], frag[1][m][r], frag[1][m][r + 2]);
        } else {
          dequantize_int8(word_of(w[i], 2 * p), scaled[i][0], frag[0][m][r], frag[0][m][r + 2]);
          dequantize_int8(word_of(w[i], 2 * p + 1), scaled[i][0], frag[1][m][r], frag[1][m][r + 2]);
        }
      }
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j) {
        const uint4 b = *reinterpret_cast<const uint4*>(&st.x[8 * j + g][t * Shape::kLaneCols + 8 * x_word]);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          mma_16x8x16(acc[m][j], frag[0][m], b.x, b.y, __nv_bfloat16{});
          mma_16x8x16(acc[m][j], frag[1][m], b.z, b.w, __nv_bfloat16{});
        }
      }
    }
  }
  wait_async_copies<0>();
  if (!warp_active) return;

  // acc[m][j]: rows 16m + g (registers 0, 1) and 16m + g + 8 (2, 3), tokens 8j + 2t and 8j + 2t + 1.
  float* out = a.out + static_cast<int64_t>(blockIdx.y) * a.tokens * a.rows;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int row = warp_row + 16 * m + g;
#pragma unroll
    for (int j = 0; j < kTokenTiles; ++j) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int token = 8 * j + 2 * t + k % 2;
        if (token < a.tokens) out[static_cast<int64_t>(token) * a.rows + row + 8 * (k / 2)] = acc[m][j][k];
      }
    }
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

// x (fp32 [tokens, cols]) rounded to bf16 with each 8 columns stored in the order 0, 4, 1, 5,
// 2, 6, 3, 7: one 16-byte word of it then holds the B fragments' pairs of columns that meet
// dequantize_int4_symmetric's pairs of weights.
__global__ void interleaved_input_kernel(const float* __restrict__ in, uint4* __restrict__ out, int64_t words) {
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < words;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* x = in + 8 * u;
    const __nv_bfloat16 type{};
    out[u] = make_uint4(pack_pair(x[0], x[4], type), pack_pair(x[1], x[5], type), pack_pair(x[2], x[6], type),
                        pack_pair(x[3], x[7], type));
  }
}

// in rounded and interleaved (interleaved_input_kernel) in the context's GEMM input scratch.
StatusOr<const __nv_bfloat16*> interleaved_input(const Tensor& in, const ExecutionContext& ctx) {
  const int64_t words = in.numel() / 8;
  KUIPER_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(ScratchUse::kGemmInput, static_cast<size_t>(words) * 16));
  interleaved_input_kernel<<<elementwise_blocks(words), kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
      in.data<float>(), static_cast<uint4*>(scratch), words);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("interleaved input");
  return static_cast<const __nv_bfloat16*>(scratch);
}

// Queues the kernel for T tokens padded to a whole number of n8 tiles.
template <WeightCode kCode, int kTokenTiles>
Status launch(const QuantizedMmaArgs& a, dim3 grid, const ExecutionContext& ctx) {
  const auto kernel = quantized_mma_kernel<kCode, kTokenTiles>;
  constexpr size_t bytes = kSharedBytes<kCode, kTokenTiles>;
  // The stages exceed the 48 KiB a kernel gets without asking.
  KUIPER_RETURN_IF_ERROR(configure_kernel_once(ctx, reinterpret_cast<const void*>(kernel), [&] {
    KUIPER_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    return ok_status();
  }));
  kernel<<<grid, kThreads, bytes, as_cuda_stream(ctx.stream())>>>(a);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("quantized mma");
  return ok_status();
}

template <WeightCode kCode>
Status launch_for_tokens(const QuantizedMmaArgs& a, dim3 grid, const ExecutionContext& ctx) {
  switch ((a.tokens + 15) / 16) {
    case 1: return launch<kCode, 2>(a, grid, ctx);
    case 2: return launch<kCode, 4>(a, grid, ctx);
    case 3: return launch<kCode, 6>(a, grid, ctx);
    default: return launch<kCode, 8>(a, grid, ctx);
  }
}

}  // namespace

bool quantized_mma_fits(int64_t tokens, const Weight& weight) {
  return tokens <= kQuantizedMmaMaxTokens && weight.rows() % kWarpRows == 0 &&
         weight.cols() % StepShape<true>::kCols == 0 && weight.group_size >= StepShape<true>::kLaneCols &&
         chunk_group_shift(weight.group_size) >= 0 && aligned_to(weight.values.raw_data(), 16) &&
         aligned_to(weight.scales.raw_data(), 4) && (weight.mins.is_empty() || aligned_to(weight.mins.raw_data(), 4));
}

Status quantized_mma(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  const int64_t rows = weight.rows(), cols = weight.cols(), tokens = in.numel() / cols;
  const bool int4 = weight.dtype() == DataType::kINT4;
  const WeightCode code = !int4                 ? WeightCode::kInt8
                          : weight.mins.is_empty() ? WeightCode::kInt4Symmetric
                                                   : WeightCode::kInt4WithMin;
  KUIPER_ASSIGN_OR_RETURN(const __nv_bfloat16* x, code == WeightCode::kInt4Symmetric ? interleaved_input(in, ctx)
                                                                                     : gemm_input_bf16(in, ctx));
  // Split the columns when the row blocks alone would leave multiprocessors idle; the partial
  // sums go where gemm_via_bf16 would dequantize W (the scratch holds at least W's bf16 copy,
  // and the splits are capped to fit in it).
  const int64_t row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t steps = cols / (int4 ? StepShape<true>::kCols : StepShape<false>::kCols);
  const int64_t target_blocks = int64_t{kBlocksPerMultiprocessor} * cuda_backend(ctx).multiprocessors;
  int64_t splits = std::clamp<int64_t>(target_blocks / row_blocks, 1, std::max<int64_t>(1, cols / kMinSplitCols));
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
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits));
  const Status launched = code == WeightCode::kInt8            ? launch_for_tokens<WeightCode::kInt8>(a, grid, ctx)
                         : code == WeightCode::kInt4Symmetric ? launch_for_tokens<WeightCode::kInt4Symmetric>(a, grid, ctx)
                                                              : launch_for_tokens<WeightCode::kInt4WithMin>(a, grid, ctx);
  KUIPER_RETURN_IF_ERROR(launched);
  if (splits > 1) {
    const int64_t n = tokens * rows;
    sum_splits_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
        sums, out.data<float>(), n, static_cast<int>(splits));
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("quantized mma split sums");
  }
  return ok_status();
}

}  // namespace kuiper::op::cuda
