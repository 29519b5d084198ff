// Attention wrapper: sizes the launch from shapes known on the host (never from positions,
// which live on the device). Over a 16-bit cache with head_dim 64 or 128, prefill (T > 1) runs
// on the tensor cores (attention_prefill.cu) and decode streams the cache through registers
// (attention_decode_kernel.cuh); everything else runs the tiled CUDA-core kernel
// (attention_kernels.cuh). Decode splits the cache into ranges whose partial results the
// combine kernel merges (flash-decoding), or, streamed, the last range of each head to finish
// (attention_decode_kernel.cuh). For a quantized wo, whichever kernel writes the normalised
// output also writes it quantized (attention_quantized_output, AttentionOutput).
#include <algorithm>
#include <cmath>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cuda/attention_decode_kernel.cuh"
#include "kuiper/op/kernels/cuda/attention_kernels.cuh"
#include "kuiper/op/kernels/cuda/attention_prefill.cuh"
#include "kuiper/op/kernels/cuda/cuda_backend.cuh"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"

namespace kuiper::op::cuda {
namespace {

// Decode splits the cache it is handed (the length is only known on the device; a model's decode
// step hands the rows the row can reach, decode_attention_reach) into ranges of at least
// kDecodeSplitMinRows rows and at most kDecodeMaxSplits ranges (kernel_shapes.h); blocks past the
// length exit at once, which costs far less than the parallelism short ranges give long contexts.

// Asks for the largest shared-memory carveout: with the driver's default pick, fewer blocks
// than shared memory allows may be resident at once.
template <typename T>
Status prefer_shared_memory(const ExecutionContext& ctx) {
  return configure_kernel_once(ctx, reinterpret_cast<const void*>(attention_kernel<T>), [] {
    KUIPER_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        attention_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout,
        cudaSharedmemCarveoutMaxShared));
    return ok_status();
  });
}

// The register-streaming decode kernel (attention_decode_kernel.cuh) takes 16-bit caches (T is
// __half or __nv_bfloat16) with head_dim 64 or 128 and rows 8-byte aligned. Its grid is one
// block per query head (not per KV head) and split.
template <typename T>
bool streaming_decode_fits(const AttentionParams<T>& p) {
  return (p.head_dim == 64 || p.head_dim == 128) &&
         (p.kv_dim * sizeof(T)) % 8 == 0 && aligned_to(p.k_cache, 8) && aligned_to(p.v_cache, 8);
}

template <typename T, int kWarps>
void launch_decode_blocks(const AttentionParams<T>& p, dim3 grid, cudaStream_t stream) {
  if (p.head_dim == 128) {
    attention_decode_kernel<T, 4, kWarps><<<grid, kWarps * 32, 0, stream>>>(p);
  } else {
    attention_decode_kernel<T, 2, kWarps><<<grid, kWarps * 32, 0, stream>>>(p);
  }
}

// A cache of one range (up to kDecodeSplitMinRows rows, the reach of a short row's decode step)
// gives each head one block, 32 blocks for LLaMA-2-7B's 32 heads: blocks of 4 warps would walk up
// to 8 chunks a warp one after another, blocks of kOneRangeDecodeWarps walk 2. Longer caches keep
// blocks of kDecodeAttentionWarps a range, which measured faster there (docs/performance.md).
constexpr int kOneRangeDecodeWarps = 16;

template <typename T>
void launch_streaming_decode(const AttentionParams<T>& p, dim3 grid, cudaStream_t stream) {
  if (p.splits == 1) {
    launch_decode_blocks<T, kOneRangeDecodeWarps>(p, grid, stream);
  } else {
    launch_decode_blocks<T, kDecodeAttentionWarps>(p, grid, stream);
  }
}

// out_quantized: null, or where one row's output also goes quantized in halves (written by
// whichever kernel writes the normalised output).
template <typename T>
Status launch(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
              const Tensor& positions, const AttentionShape& shape, Tensor& out, Tensor* out_quantized,
              const ExecutionContext& ctx) {
  const cudaStream_t stream = as_cuda_stream(ctx.stream());
  KUIPER_RETURN_IF_ERROR(prefer_shared_memory<T>(ctx));
  const int64_t tokens = positions.numel(), context = k_cache.dim(0);
  AttentionParams<T> p{};
  p.q = q.data<float>();
  p.k_cache = k_cache.data<T>();
  p.v_cache = v_cache.data<T>();
  p.positions = positions.data<int32_t>();
  p.out = attention_output(out, out_quantized);
  p.n_heads = shape.n_heads;
  p.head_dim = shape.head_dim;
  p.group = shape.group();
  p.blocks_per_kv_head = (p.group + kMaxGroup - 1) / kMaxGroup;
  p.context = context;
  p.kv_dim = k_cache.dim(-1);
  p.scale = 1.f / std::sqrt(static_cast<float>(shape.head_dim));
  p.tile_rows = static_cast<int>(std::min<size_t>(
      kMaxTileRows, kTileBytes / (static_cast<size_t>(shape.head_dim) * sizeof(T))));
  const size_t row_bytes = shape.head_dim * sizeof(T);
  p.wide_copies = row_bytes % 16 == 0 && (p.kv_dim * sizeof(T)) % 16 == 0 &&
                  aligned_to(p.k_cache, 16) && aligned_to(p.v_cache, 16);
  if (tokens == 1) {
    const int64_t rows =
        std::max<int64_t>(kDecodeSplitMinRows, (context + kDecodeMaxSplits - 1) / kDecodeMaxSplits);
    p.span = static_cast<int>((rows + p.tile_rows - 1) / p.tile_rows * p.tile_rows);
    p.splits = static_cast<int>((context + p.span - 1) / p.span);
  } else {
    p.span = static_cast<int>(std::min<int64_t>(context, INT32_MAX));
    p.splits = 1;
  }
  if (p.splits > 1) {
    KUIPER_ASSIGN_OR_RETURN(const AttentionPartials partials,
                            attention_partials(ctx, tokens * shape.n_heads * p.splits, shape.head_dim));
    p.partial_out = partials.out;
    p.partial_max_sum = partials.max_sum;
  }
  const dim3 grid(static_cast<unsigned>(shape.n_kv_heads * p.blocks_per_kv_head),
                  static_cast<unsigned>(p.splits), static_cast<unsigned>(tokens));
  bool streamed = false;
  if constexpr (!std::is_same_v<T, float>) {
    streamed = tokens == 1 && streaming_decode_fits(p);
    if (streamed && p.splits > 1 && shape.n_heads <= kHeadArrivalCounters) {
      p.arrivals = cuda_backend(ctx).head_arrivals;
    }
    if (streamed) launch_streaming_decode(p, dim3(shape.n_heads, p.splits), stream);
  }
  if (!streamed) {
    const size_t tiles_bytes = 2 * static_cast<size_t>(p.tile_rows) * row_bytes;
    attention_kernel<T><<<grid, kAttentionThreads, tiles_bytes, stream>>>(p);
  }
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("attention");
  if (p.splits > 1 && p.arrivals == nullptr) {
    const dim3 combine_grid(static_cast<unsigned>(shape.n_heads), static_cast<unsigned>(tokens));
    KUIPER_CUDA_RETURN_IF_ERROR(launch_overlapped(attention_combine_kernel, combine_grid, dim3(kCombineThreads), 0,
                                                  stream, p.partial_out, p.partial_max_sum, p.positions, context,
                                                  shape.n_heads, shape.head_dim, p.span, p.splits, p.out));
    KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("attention combine");
  }
  return ok_status();
}

// The public entries' shared checks and dispatch.
Status attend(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
              const AttentionShape& shape, Tensor& out, Tensor* out_quantized, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda_attention(q, k_cache, v_cache, positions, shape, out));
  const int hd = shape.head_dim;
  const int64_t tokens = positions.numel();
  if (hd % 2 != 0 || hd > kMaxHeadDim || tokens > kMaxGridY) {
    return unsupported("cuda attention needs an even head_dim up to " +
                       std::to_string(kMaxHeadDim) + " and at most " +
                       std::to_string(kMaxGridY) + " rows, got head_dim " + std::to_string(hd) +
                       " and " + std::to_string(tokens) + " rows");
  }
  if (out_quantized != nullptr) {
    const int64_t n = static_cast<int64_t>(shape.n_heads) * hd;
    if (tokens != 1 || hd % kInt8InputBlock != 0) {
      return unsupported("cuda attention writes its output quantized for one row with head_dim a multiple of " +
                         std::to_string(kInt8InputBlock) + ", got " + std::to_string(tokens) + " rows, head_dim " +
                         std::to_string(hd));
    }
    KUIPER_RETURN_IF_ERROR(expect_cuda(*out_quantized, DataType::kINT8, "attention quantized output"));
    if (out_quantized->numel() != decode_quantized_x_bytes(n)) {
      return invalid_argument("attention quantized output " + out_quantized->describe() + " does not fit " +
                              std::to_string(n) + " outputs");
    }
  }
  if (tokens == 0) return ok_status();
  if (tokens > 1 && tensor_core_prefill_fits(q, k_cache, v_cache, shape, out)) {
    return tensor_core_prefill(q, k_cache, v_cache, positions, shape, out, ctx);
  }
  return dispatch_float_type(k_cache.dtype(), [&](auto zero) {
    return launch<decltype(zero)>(q, k_cache, v_cache, positions, shape, out, out_quantized, ctx);
  });
}

}  // namespace

Status expect_cuda_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                             const AttentionShape& shape, const Tensor& out) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(q, DataType::kFP32, "attention q"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(k_cache, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(v_cache, k_cache.dtype(), "value cache"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(positions, DataType::kINT32, "attention positions"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(out, "attention output"));
  return check_attention_shapes(q, k_cache, v_cache, positions, shape, out);
}

Status attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                 const AttentionShape& shape, Tensor& out, const ExecutionContext& ctx) {
  return attend(q, k_cache, v_cache, positions, shape, out, nullptr, ctx);
}

Status attention_quantized_output(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const Tensor& positions, const AttentionShape& shape, Tensor& out,
                                  Tensor& out_quantized, const ExecutionContext& ctx) {
  return attend(q, k_cache, v_cache, positions, shape, out, &out_quantized, ctx);
}

}  // namespace kuiper::op::cuda
