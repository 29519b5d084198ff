// The decode GEMV's host side: checks a DecodeGemv, picks how rows are read (decode_gemv.cuh,
// decode_gemv_one_pass.cuh) from the weight dtype, shape and alignment, and launches the kernel
// for its prologue and epilogue. Only the combinations the model uses are built (compile time
// grows with each): stores and rope/KV with and without a norm, the residual accumulate, and a
// norm-fed swiglu.
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_one_pass.cuh"

namespace kuiper::op::cuda {
namespace {

// How rows are read for each kind of epilogue: plain stores with Plain, the residual accumulate
// with Accumulating, and swiglu and rope, which combine pairs of rows, with Paired (two or more
// rows per warp or block).
template <typename Plain, typename Accumulating, typename Paired>
Status launch_rows(const DecodeGemvArgs& a, GemvEpilogue epilogue, cudaStream_t stream) {
  const bool norm = a.in_sumsq != nullptr;
  cudaError_t e = cudaErrorNotSupported;
  switch (epilogue) {
    case GemvEpilogue::kStore:
      e = norm ? launch_decode_gemv_as<Plain, GemvEpilogue::kStore, true>(a, stream)
               : launch_decode_gemv_as<Plain, GemvEpilogue::kStore, false>(a, stream);
      break;
    case GemvEpilogue::kAccumulate:
      if (!norm) e = launch_decode_gemv_as<Accumulating, GemvEpilogue::kAccumulate, false>(a, stream);
      break;
    case GemvEpilogue::kSwiglu:
      if (norm) e = launch_decode_gemv_as<Paired, GemvEpilogue::kSwiglu, true>(a, stream);
      break;
    case GemvEpilogue::kRopeKv:
      e = norm ? launch_decode_gemv_as<Paired, GemvEpilogue::kRopeKv, true>(a, stream)
               : launch_decode_gemv_as<Paired, GemvEpilogue::kRopeKv, false>(a, stream);
      break;
  }
  if (e == cudaErrorNotSupported) {
    return unsupported(std::string("decode_gemv: this epilogue is built only ") +
                       (norm ? "without" : "with") + " a norm prologue");
  }
  KUIPER_CUDA_RETURN_IF_ERROR(e);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("decode_gemv");
  return ok_status();
}

// int8 rows per warp. Up to this many rows, plain and accumulating GEMVs give a warp four rows
// and half of their columns, the other half going to another warp of the block: a 4096-row
// matrix read four whole rows per warp has too few warps to keep every multiprocessor busy,
// and two rows per warp read x twice as often per weight. Swiglu and rope at that height (no
// 7B-class model has them) keep 2 rows x 2 loads. Taller matrices read four whole rows per
// warp, with ptxas held to three blocks per multiprocessor (its 80 registers spill 8 bytes).
// On an H200, % of copy bandwidth: 4096x4096 50% (2x2) -> 62% (4x1 split in two; in four
// 55%), 4096x11008 59% -> 77%; 11008x4096 4x1 with three blocks 75% (two blocks 60%, 2x2 53%,
// split in two 67%), 32000x4096 4x1 82-84% (2x2 60%). LLaMA-2-7B int8 decode at context 128:
// 346 -> 372 tokens/s with the three-block 4x1 for the tall matrices, 377 -> 408 with the
// split 4x1 for the short ones.
constexpr int kInt8ShortRowsUpTo = 8192;

// fp32/fp16/bf16 rows that one block reads in one pass (decode_gemv_one_pass.cuh) do so, except
// for the residual accumulate. The others, and the accumulate, take the warp kernel: one row
// per warp, two loads per burst up to this many rows, four above. On an H200, % of copy
// bandwidth, 1x2 / 1x4: 4096x4096 79 / 76% (68% on a slower H200), 4096x11008 95 / 95% (85% on
// the slower one), 11008x4096 88 / 92%, 32000x4096 99 / 103%. LLaMA-2-7B bf16 decode at context
// 128 / 4096: 261.9 / 229.3 -> 272.3 / 237.3 tokens/s; LLaMA-3-8B 242.2 / 219.5 -> 251.3 /
// 227.4 (all before the one-pass kernel).
constexpr int kDenseShortRowsUpTo = 8192;

Status check_and_fill(const DecodeGemv& g, DecodeGemvArgs& a) {
  if (!g.in || !g.weight || !g.out) return invalid_argument("decode_gemv needs in, weight and out");
  const Weight& w = *g.weight;
  if (w.values.is_empty() || w.values.ndim() != 2 || w.device() != DeviceType::kCUDA) {
    return invalid_argument("decode_gemv weight must be a 2-d cuda matrix, got " + w.values.describe());
  }
  if (w.is_quantized()) KUIPER_RETURN_IF_ERROR(check_int8_weight(w));
  else KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(w.values, "decode_gemv weight"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*g.in, DataType::kFP32, "decode_gemv input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(*g.out, DataType::kFP32, "decode_gemv output"));
  const int64_t rows = w.rows(), cols = w.cols();
  if (rows == 0 || cols == 0 || rows > INT32_MAX || cols > INT32_MAX) {
    return unsupported("decode_gemv weight must be non-empty and below 2^31 per side, got " +
                       w.values.describe());
  }
  if (g.in->numel() != cols) {
    return invalid_argument("decode_gemv input " + g.in->describe() + " does not fit weight " +
                            w.values.describe());
  }
  if (g.in_sumsq != nullptr) {
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.in_sumsq, DataType::kFP32, "decode_gemv input sums of squares"));
    if (g.in_sumsq->numel() != decode_sumsq_runs(cols)) {
      return invalid_argument("decode_gemv input sums of squares " + g.in_sumsq->describe() +
                              " do not fit weight " + w.values.describe());
    }
    a.in_sumsq = g.in_sumsq->data<float>();
    a.sumsq_runs = static_cast<int>(decode_sumsq_runs(cols));
    a.eps = g.norm_eps;
  }
  if (g.next_norm_weight != nullptr) {
    if (g.epilogue != GemvEpilogue::kAccumulate || !g.next_normed || !g.next_sumsq) {
      return invalid_argument("decode_gemv: a next norm needs the accumulate epilogue and its two outputs");
    }
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.next_norm_weight, DataType::kFP32, "decode_gemv next norm weight"));
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.next_normed, DataType::kFP32, "decode_gemv next normed"));
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.next_sumsq, DataType::kFP32, "decode_gemv next sums of squares"));
    if (g.next_norm_weight->numel() != rows || g.next_normed->numel() != rows ||
        g.next_sumsq->numel() != decode_sumsq_runs(rows)) {
      return invalid_argument("decode_gemv next norm tensors do not fit " + std::to_string(rows) +
                              " rows: weight " + g.next_norm_weight->describe() + ", normed " +
                              g.next_normed->describe() + ", sums " + g.next_sumsq->describe());
    }
    a.next_norm_weight = g.next_norm_weight->data<float>();
    a.next_normed = g.next_normed->data<float>();
    a.next_sumsq = g.next_sumsq->data<float>();
  }
  a.w = w.values.raw_data();
  a.x = g.in->data<float>();
  a.rows = static_cast<int>(rows);
  a.cols = static_cast<int>(cols);
  a.out = g.out->data<float>();
  if (w.is_quantized()) {
    a.scales = w.scales.data<float>();
    a.group_size = w.group_size;
    a.group_shift = chunk_group_shift(w.group_size);
  }
  switch (g.epilogue) {
    case GemvEpilogue::kStore:
    case GemvEpilogue::kAccumulate:
      if (g.out->numel() == rows) return ok_status();
      break;
    case GemvEpilogue::kSwiglu:
      if (rows % 2 == 0 && g.out->numel() == rows / 2) return ok_status();
      break;
    case GemvEpilogue::kRopeKv:
      return rope_kv_args(g.rope_kv, rows, 1, *g.out, a.rope);
  }
  return invalid_argument("decode_gemv output " + g.out->describe() + " does not fit weight " +
                          w.values.describe() + " and its epilogue");
}

}  // namespace

Status decode_gemv(const DecodeGemv& gemv, Stream stream) {
  DecodeGemvArgs a;
  KUIPER_RETURN_IF_ERROR(check_and_fill(gemv, a));
  const cudaStream_t s = as_cuda_stream(stream);
  const bool inputs_aligned = aligned_to(a.w, 16) && aligned_to(a.x, 16);
  const DataType dtype = gemv.weight->dtype();
  if (dtype == DataType::kINT8) {
    if (inputs_aligned && a.cols % 16 == 0 && a.group_shift >= 0) {
      using Short = SplitColumns<Int8Chunks<4, 1>, 2>;
      using ShortPaired = Int8Chunks<2, 2>;
      using Tall = Int8Chunks<4, 1, 3>;
      return a.rows <= kInt8ShortRowsUpTo ? launch_rows<Short, Short, ShortPaired>(a, gemv.epilogue, s)
                                          : launch_rows<Tall, Tall, Tall>(a, gemv.epilogue, s);
    }
    using Scalar = ScalarRows<int8_t>;
    return launch_rows<Scalar, Scalar, ScalarRows<int8_t, 2>>(a, gemv.epilogue, s);
  }
  return dispatch_float_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (inputs_aligned && a.cols % DenseChunks<T>::kElems == 0) {
      using Short = DenseChunks<T, 2>;
      using Tall = DenseChunks<T, 4>;
      const bool short_rows = a.rows <= kDenseShortRowsUpTo;
      if (one_pass_fits<T>(a)) {
        using Plain = DenseOnePass<T, 8>;
        using Pairs = DenseOnePass<T, 2>;
        return short_rows ? launch_rows<Plain, Short, Pairs>(a, gemv.epilogue, s)
                          : launch_rows<Plain, Tall, Pairs>(a, gemv.epilogue, s);
      }
      using Paired = DenseChunks<T, 2, 2>;
      return short_rows ? launch_rows<Short, Short, Paired>(a, gemv.epilogue, s)
                        : launch_rows<Tall, Tall, Paired>(a, gemv.epilogue, s);
    }
    using Scalar = ScalarRows<T>;
    return launch_rows<Scalar, Scalar, ScalarRows<T, 2>>(a, gemv.epilogue, s);
  });
}

}  // namespace kuiper::op::cuda
