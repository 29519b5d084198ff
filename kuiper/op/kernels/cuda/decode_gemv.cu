// The decode GEMV's host side: checks a DecodeGemv, picks how rows are read (decode_gemv.cuh)
// from the weight dtype, shape and alignment, and launches the kernel for its prologue and
// epilogue. Only the combinations the model uses are built (compile time grows with each):
// stores and rope/KV with and without a norm, the residual accumulate, and a norm-fed swiglu.
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv.cuh"

namespace kuiper::op::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Below this many rows, reading two rows per warp (sharing each x load, half the warps) beats
// one: on an H200, 4096x4096 bf16 65% -> 69% of copy bandwidth, 4096x11008 69% -> 77%; on
// taller matrices one row per warp with a deeper burst wins (11008x4096 91% against 83%).
// int8 likewise: 2 rows x 8 loads against 4 x 4, 4096x4096 40% -> 47%, 4096x11008 44% -> 52%,
// but 32000x4096 84% -> 70%.
constexpr int kPairedRowsUpTo = 8192;

// Rows is how rows are read one per warp, Paired two (or more) per warp: what swiglu and rope,
// which combine pairs of rows, need, and what short matrices prefer.
template <typename Rows, typename Paired>
Status launch_rows(const DecodeGemvArgs& a, GemvEpilogue epilogue, cudaStream_t stream) {
  const bool norm = a.in_sumsq != nullptr, paired = a.rows <= kPairedRowsUpTo;
  cudaError_t e = cudaErrorNotSupported;
  switch (epilogue) {
    case GemvEpilogue::kStore:
      if (paired) {
        e = norm ? launch_decode_gemv<Paired, GemvEpilogue::kStore, true>(a, stream)
                 : launch_decode_gemv<Paired, GemvEpilogue::kStore, false>(a, stream);
      } else {
        e = norm ? launch_decode_gemv<Rows, GemvEpilogue::kStore, true>(a, stream)
                 : launch_decode_gemv<Rows, GemvEpilogue::kStore, false>(a, stream);
      }
      break;
    case GemvEpilogue::kAccumulate:
      if (!norm) {
        e = paired ? launch_decode_gemv<Paired, GemvEpilogue::kAccumulate, false>(a, stream)
                   : launch_decode_gemv<Rows, GemvEpilogue::kAccumulate, false>(a, stream);
      }
      break;
    case GemvEpilogue::kSwiglu:
      if (norm) e = launch_decode_gemv<Paired, GemvEpilogue::kSwiglu, true>(a, stream);
      break;
    case GemvEpilogue::kRopeKv:
      e = norm ? launch_decode_gemv<Paired, GemvEpilogue::kRopeKv, true>(a, stream)
               : launch_decode_gemv<Paired, GemvEpilogue::kRopeKv, false>(a, stream);
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

// log2(g) when g is a power of two ≥ 16, else -1.
int chunk_group_shift(int g) {
  if (g < 16 || (g & (g - 1)) != 0) return -1;
  int shift = 0;
  while ((1 << shift) < g) ++shift;
  return shift;
}

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
  const auto runs = [](int64_t n) { return (n + kDecodeSumsqRun - 1) / kDecodeSumsqRun; };
  if (g.in_sumsq != nullptr) {
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.in_sumsq, DataType::kFP32, "decode_gemv input sums of squares"));
    if (g.in_sumsq->numel() != runs(cols)) {
      return invalid_argument("decode_gemv input sums of squares " + g.in_sumsq->describe() +
                              " do not fit weight " + w.values.describe());
    }
    a.in_sumsq = g.in_sumsq->data<float>();
    a.sumsq_runs = static_cast<int>(runs(cols));
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
        g.next_sumsq->numel() != runs(rows)) {
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
  const bool inputs_aligned = aligned16(a.w) && aligned16(a.x);
  const DataType dtype = gemv.weight->dtype();
  if (dtype == DataType::kINT8) {
    if (inputs_aligned && a.cols % 16 == 0 && a.group_shift >= 0) {
      // Both shapes hold whole row pairs, so each serves every epilogue.
      return a.rows <= kPairedRowsUpTo
                 ? launch_rows<Int8Chunks<2, 8>, Int8Chunks<2, 8>>(a, gemv.epilogue, s)
                 : launch_rows<Int8Chunks<4, 4>, Int8Chunks<4, 4>>(a, gemv.epilogue, s);
    }
    return launch_rows<ScalarRows<int8_t>, ScalarRows<int8_t, 2>>(a, gemv.epilogue, s);
  }
  return dispatch_float_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (inputs_aligned && a.cols % DenseChunks<T>::kElems == 0) {
      return launch_rows<DenseChunks<T>, DenseChunks<T, 8, 2>>(a, gemv.epilogue, s);
    }
    return launch_rows<ScalarRows<T>, ScalarRows<T, 2>>(a, gemv.epilogue, s);
  });
}

}  // namespace kuiper::op::cuda
