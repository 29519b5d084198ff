// The decode GEMV's host side: checks a DecodeGemv, chooses the kernel and row reader for it
// (choose_gemv_kernel) and launches the one built for its prologue and epilogue. Only the
// combinations the model uses are built (compile time grows with each): stores, swiglu and
// rope/KV with and without a norm, the residual accumulate without. docs/performance.md has the
// measurements behind the choices.
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_backend.cuh"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_int8_input_rows.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_one_pass_kernel.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_warp_kernel.cuh"

namespace kuiper::op::cuda {
namespace {

// Which kernel runs a decode GEMV, and how the warp kernel reads its rows.
enum class GemvKernel {
  kOnePass,  // decode_gemv_one_pass_kernel.cuh: a block reads its rows in one pass
  kWarp,     // decode_gemv_warp_kernel.cuh: warps walk their rows in bursts
};
enum class GemvRowReader {
  kShortChunks,  // 16-byte chunks (int8/int4: units), the layout for matrices of up to k*ShortRowsUpTo rows
  kTallChunks,   // the same, the layout for taller matrices
  kScalar,       // one element at a time: any alignment, row length or int8/int4 group, and
                 // int8/int4 rows too long for their quantized x in shared memory (kInt8InputMaxCols)
};
struct GemvKernelChoice {
  GemvKernel kernel;
  GemvRowReader reader;  // the warp kernel's (the one-pass kernel reads 16-byte chunks)
  // Whether the kernel normalizes x itself where x comes with its norm's weight (DecodeGemv::
  // in_norm_weight): the one-pass kernel as it reads x, the readers that quantize x to int8 as
  // they quantize it (decode_gemv_int8_input.cuh). For the others decode_gemv normalizes first.
  bool normalizes_x;
  // Whether the reader multiplies x handed on quantized in halves (DecodeGemv::in_quantized) when
  // it comes: int8 and int4 rows read in blocks of kInt8InputBlock weights.
  bool reads_halves;
};

// int8 and int4 matrices of up to this many rows are read 4 rows per warp with each row's
// columns split between two warps (SplitColumns<..<4, 1>, 2>): four whole rows per warp leave
// too few warps to keep every multiprocessor busy, and two rows per warp read x twice as often
// per weight. Swiglu and rope pair rows inside a warp: int8 the same way (two pairs a warp),
// int4 one pair of whole rows, each the faster there. Taller ones read four whole rows per
// warp: int4 with ptxas held to three blocks per multiprocessor (<4, 1, 3>, 80 registers); int8
// units are twice the bytes and spilled 192 bytes at three blocks, so two.
// int4 rows are multiplied in integers with x quantized to int8 in shared memory
// (Int4Int8Chunks). int8 rows of tall matrices are too (Int8Int8Chunks). Short int8 matrices
// multiply in integers where x comes handed on quantized in halves (Int8HalvesChunks, 2 rows x 2
// units, as int4's short layout; it sped up LLaMA-2-7B's wo and w2), and otherwise widen each
// weight to fp32 (Int8Chunks): where every block of 16 rows would quantize all of x again, that
// measured slower than widening. From 6144 rows (LLaMA-3-8B's q|k|v) the tall layouts win
// (docs/performance.md, "Measurements behind other choices", has the figures of each).
constexpr int kInt8ShortRowsUpTo = 4096;

// fp32/fp16/bf16 matrices that the warp kernel reads (the residual accumulate, and rows too
// long for one pass) take one row per warp and two 16-byte loads per burst up to this many
// rows, four above: short matrices have fewer warps, and deeper bursts leave them idle longer.
// Swiglu and rope pair rows inside a warp, 2 rows x 2 loads.
constexpr int kDenseShortRowsUpTo = 8192;

// The one place the kernel is chosen: fp32/fp16/bf16 rows that one block reads in one pass
// (16-byte aligned, whole chunks, at most kOnePassMaxChunks) take the one-pass kernel, except
// for the residual accumulate that hands a norm on; everything else takes the warp kernel,
// reading 16-byte chunks where the alignment, row length and (int8/int4) group size allow, else
// one element at a time.
GemvKernelChoice choose_gemv_kernel(DataType dtype, const DecodeGemvArgs& a, GemvEpilogue epilogue) {
  const bool aligned = aligned_to(a.w, 16) && aligned_to(a.x, 16);
  if (dtype == DataType::kINT8 || dtype == DataType::kINT4) {
    const bool tall = a.rows > kInt8ShortRowsUpTo;
    const bool widened = dtype == DataType::kINT8 && !tall;  // unless x comes handed on in halves
    // Rows read in units of `unit` weights, each within one group.
    const auto in_units = [&](int unit) {
      return a.cols % unit == 0 && a.group_shift >= 0 && a.group_size >= unit;
    };
    // Blocks of int8 x (kInt8InputBlock), whose quantized x a staged reader holds in shared
    // memory; or 16-byte chunks, widened.
    const bool integer_units = in_units(kInt8InputBlock) && a.cols <= kInt8InputMaxCols;
    if (!aligned || !(widened ? in_units(16) : integer_units)) {
      return {GemvKernel::kWarp, GemvRowReader::kScalar, false, false};
    }
    const GemvRowReader chunks = tall ? GemvRowReader::kTallChunks : GemvRowReader::kShortChunks;
    return {GemvKernel::kWarp, chunks, !widened, integer_units};
  }
  const int elems = 16 / static_cast<int>(dtype_size(dtype));
  if (!aligned || a.cols % elems != 0) return {GemvKernel::kWarp, GemvRowReader::kScalar, false, false};
  const GemvRowReader chunks = a.rows <= kDenseShortRowsUpTo ? GemvRowReader::kShortChunks
                                                             : GemvRowReader::kTallChunks;
  const bool one_pass = a.cols / elems <= kOnePassMaxChunks &&
                        (epilogue != GemvEpilogue::kAccumulate || a.next_norm_weight == nullptr);
  return {one_pass ? GemvKernel::kOnePass : GemvKernel::kWarp, chunks, one_pass, false};
}

// The error for an epilogue and prologue that no kernel is built for.
Status not_built(GemvEpilogue epilogue, InputNorm norm) {
  const char* name = epilogue == GemvEpilogue::kStore        ? "store"
                     : epilogue == GemvEpilogue::kAccumulate ? "accumulate"
                     : epilogue == GemvEpilogue::kSwiglu     ? "swiglu"
                                                             : "rope/KV";
  return unsupported(std::string("decode_gemv: the ") + name + " epilogue is not built " +
                     (norm == InputNorm::kNone ? "without" : "with") + " a norm prologue");
}

// Runs launch.template operator()<kEpi, kNorm>() for the built combination that `epilogue`
// and `norm` name, and checks the launch. kSumsHere: whether the kernel sums the squares of x
// itself (GemvKernelChoice::normalizes_x).
template <bool kSumsHere, typename Launch>
Status launch_built(GemvEpilogue epilogue, InputNorm norm, Launch&& launch) {
  using E = GemvEpilogue;
  using N = InputNorm;
  if ((epilogue == E::kAccumulate && norm != N::kNone) || (norm == N::kSummedHere && !kSumsHere)) {
    return not_built(epilogue, norm);
  }
  const auto with_norm = [&]<E kEpi>() {
    if constexpr (kEpi != E::kAccumulate) {
      if (norm == N::kGivenSums) return launch.template operator()<kEpi, N::kGivenSums>();
      if constexpr (kSumsHere) {
        if (norm == N::kSummedHere) return launch.template operator()<kEpi, N::kSummedHere>();
      }
    }
    return launch.template operator()<kEpi, N::kNone>();
  };
  cudaError_t e = cudaSuccess;
  switch (epilogue) {
    case E::kStore: e = with_norm.template operator()<E::kStore>(); break;
    case E::kAccumulate: e = with_norm.template operator()<E::kAccumulate>(); break;
    case E::kSwiglu: e = with_norm.template operator()<E::kSwiglu>(); break;
    case E::kRopeKv: e = with_norm.template operator()<E::kRopeKv>(); break;
  }
  KUIPER_CUDA_RETURN_IF_ERROR(e);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("decode_gemv");
  return ok_status();
}

InputNorm input_norm(const DecodeGemvArgs& a) {
  return a.in_sumsq != nullptr ? InputNorm::kGivenSums
         : a.in_norm_weight != nullptr ? InputNorm::kSummedHere
                                       : InputNorm::kNone;
}

// Rope rotates pairs of rows in a warp, and the one-pass kernel's swiglu pairs rows in a block,
// so they need two or more rows per warp or block. The warp kernel's swiglu meets its pairs
// across warps (swiglu_epilogue), so it could take the Unpaired readers too (not measured).
constexpr bool pairs_rows(GemvEpilogue e) { return e == GemvEpilogue::kSwiglu || e == GemvEpilogue::kRopeKv; }

// The warp kernel reading rows as Unpaired does for stores and the accumulate, as Paired does
// for swiglu and rope.
template <typename Unpaired, typename Paired = Unpaired>
Status launch_warp(const DecodeGemvArgs& a, GemvEpilogue epilogue, cudaStream_t stream) {
  // A reader that stages x normalizes it as it stages it (quantize_input), in the kernel built
  // without a norm.
  constexpr bool kStages = StagesInput<Unpaired> && StagesInput<Paired>;
  return launch_built<kStages>(epilogue, input_norm(a), [&]<GemvEpilogue kEpi, InputNorm kNorm>() {
    using Rows = std::conditional_t<pairs_rows(kEpi), Paired, Unpaired>;
    return launch_decode_gemv<Rows, kEpi, kNorm == InputNorm::kGivenSums>(a, stream);
  });
}

// The one-pass kernel: 8 rows per block for stores, one pair for swiglu and rope (pairs in 4 or
// 8 rows per block measured slower).
template <typename T>
Status launch_one_pass(const DecodeGemvArgs& a, GemvEpilogue epilogue, cudaStream_t stream) {
  return launch_built<true>(epilogue, input_norm(a), [&]<GemvEpilogue kEpi, InputNorm kNorm>() {
    return launch_decode_gemv_one_pass<T, pairs_rows(kEpi) ? 2 : 8, kEpi, kNorm>(a, stream);
  });
}

// The warp kernel's row readers for int8 weights (kInt8ShortRowsUpTo says why), as
// visit.operator()<Unpaired, Paired>() takes them (launch_warp's readers). Tall matrices multiply
// in integers, with x quantized by each block or handed on in halves (x_in_halves: a.x_int8);
// short ones in integers from halves, else widened.
template <typename Visit>
auto with_int8_layout(GemvRowReader reader, bool x_in_halves, Visit&& visit) {
  switch (reader) {
    case GemvRowReader::kShortChunks: {
      if (x_in_halves) return visit.template operator()<Int8HalvesChunks<2, 2>, Int8HalvesChunks<2, 2>>();
      using Rows = SplitColumns<Int8Chunks<4, 1>, 2>;
      return visit.template operator()<Rows, Rows>();
    }
    case GemvRowReader::kTallChunks:
      if (x_in_halves) return visit.template operator()<Int8HalvesChunks<4, 1>, Int8HalvesChunks<4, 1>>();
      return visit.template operator()<Int8Int8Chunks<4, 1>, Int8Int8Chunks<4, 1>>();
    case GemvRowReader::kScalar:
      break;
  }
  return visit.template operator()<ScalarRows<int8_t>, ScalarRows<int8_t, 2>>();
}

// The same layouts for int4 weights, all multiplied in integers, as visit.operator()<Unpaired,
// Paired>() takes them (launch_warp's readers). x handed on in halves (x_in_halves: a.x_int8) is
// read by the same layouts where they won with it (docs/performance.md, "Measurements behind other choices"), else by
// the staged readers, which quantize x in each block; tall matrices read from halves with
// kTallBlocks blocks a multiprocessor (two_blocks_fill_better).
template <int kTallBlocks = 3, typename Visit>
auto with_int4_layout(GemvRowReader reader, bool x_in_halves, Visit&& visit) {
  switch (reader) {
    case GemvRowReader::kShortChunks:
      if (x_in_halves) return visit.template operator()<Int4HalvesChunks<2, 2>, Int4HalvesChunks<2, 2>>();
      return visit.template operator()<SplitColumns<Int4Int8Chunks<4, 1>, 2>, Int4Int8Chunks<2, 2>>();
    case GemvRowReader::kTallChunks:
      if (x_in_halves) {
        return visit.template operator()<Int4HalvesChunks<4, 1, kTallBlocks>, Int4HalvesChunks<4, 1, kTallBlocks>>();
      }
      return visit.template operator()<Int4Int8Chunks<4, 1, 3>, Int4Int8Chunks<4, 1, 3>>();
    case GemvRowReader::kScalar:
      break;
  }
  return visit.template operator()<ScalarRows<PackedInt4>, ScalarRows<PackedInt4, 2>>();
}

// The outputs one block of Rows writes with `epilogue`: its rows, or half of them for swiglu. A
// block quantizes its outputs for the next GEMV (decode_gemv_epilogues.cuh) where they are whole
// halves of 16.
template <typename Rows>
constexpr int block_outputs(GemvEpilogue epilogue) {
  constexpr int kBlockRows = decode_gemv_block_rows<Rows>();
  return epilogue == GemvEpilogue::kSwiglu ? kBlockRows / 2 : kBlockRows;
}
// The tall int4 layouts' blocks hold the same rows with 2 or 3 a multiprocessor
// (two_blocks_fill_better).
bool quantizes_outputs(DataType dtype, GemvRowReader reader, bool x_in_halves, GemvEpilogue epilogue) {
  const auto whole_halves = [&]<typename Unpaired, typename Paired>() {
    return (pairs_rows(epilogue) ? block_outputs<Paired>(epilogue) : block_outputs<Unpaired>(epilogue)) % 16 == 0;
  };
  return dtype == DataType::kINT8 ? with_int8_layout(reader, x_in_halves, whole_halves)
                                  : with_int4_layout(reader, x_in_halves, whole_halves);
}

// A tall int4 matrix read from halves runs as many blocks of 32 rows as it has, in waves of
// 2 or 3 per multiprocessor; it streams fastest with the budget whose last wave is the fuller
// (the kernel bench's tall shapes, docs/performance.md, "Measurements behind other choices"). Ties keep 3.
bool two_blocks_fill_better(int rows, int multiprocessors) {
  constexpr int kRows = decode_gemv_block_rows<Int4HalvesChunks<4, 1, 3>>();
  static_assert(kRows == decode_gemv_block_rows<Int4HalvesChunks<4, 1, 2>>());
  const int64_t blocks = (rows + kRows - 1) / kRows;
  const auto last_wave_fill = [&](int per_multiprocessor) {
    const int64_t slots = int64_t{per_multiprocessor} * multiprocessors, waves = (blocks + slots - 1) / slots;
    return static_cast<double>(blocks) / static_cast<double>(waves * slots);
  };
  return last_wave_fill(2) > last_wave_fill(3);
}

// int8 and int4 weights.
Status launch_quantized(DataType dtype, const DecodeGemvArgs& a, GemvKernelChoice choice, GemvEpilogue epilogue,
                        int multiprocessors, cudaStream_t stream) {
  const GemvRowReader reader = choice.reader;
  const bool x_in_halves = a.x_int8 != nullptr && choice.reads_halves;
  if (a.out_int8 != nullptr && !quantizes_outputs(dtype, reader, x_in_halves, epilogue)) {
    return unsupported("decode_gemv: this layout cannot write its output quantized (decode_gemv_quantizes_output)");
  }
  const auto launch = [&]<typename Unpaired, typename Paired>() {
    return launch_warp<Unpaired, Paired>(a, epilogue, stream);
  };
  if (dtype == DataType::kINT8) return with_int8_layout(reader, x_in_halves, launch);
  if (x_in_halves && reader == GemvRowReader::kTallChunks && two_blocks_fill_better(a.rows, multiprocessors)) {
    return with_int4_layout<2>(reader, x_in_halves, launch);
  }
  return with_int4_layout(reader, x_in_halves, launch);
}

// The warp kernel's row readers for fp32/fp16/bf16 weights (kDenseShortRowsUpTo says why).
template <typename T>
Status launch_dense(const DecodeGemvArgs& a, GemvRowReader reader, GemvEpilogue epilogue,
                    cudaStream_t stream) {
  using Paired = DenseChunks<T, 2, 2>;
  switch (reader) {
    case GemvRowReader::kShortChunks:
      return launch_warp<DenseChunks<T, 2>, Paired>(a, epilogue, stream);
    case GemvRowReader::kTallChunks:
      return launch_warp<DenseChunks<T, 4>, Paired>(a, epilogue, stream);
    case GemvRowReader::kScalar:
      break;
  }
  return launch_warp<ScalarRows<T>, ScalarRows<T, 2>>(a, epilogue, stream);
}

Status check_and_fill(const DecodeGemv& g, DecodeGemvArgs& a) {
  if (!g.in || !g.weight || !g.out) return invalid_argument("decode_gemv needs in, weight and out");
  const Weight& w = *g.weight;
  if (w.values.is_empty() || w.values.ndim() != 2 || w.device() != DeviceType::kCUDA) {
    return invalid_argument("decode_gemv weight must be a 2-d cuda matrix, got " + w.values.describe());
  }
  if (w.dtype() == DataType::kINT4) KUIPER_RETURN_IF_ERROR(check_int4_weight(w));
  else if (w.is_quantized()) KUIPER_RETURN_IF_ERROR(check_int8_weight(w));
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
  if (g.in_norm_weight != nullptr) {
    if (g.in_sumsq != nullptr) return invalid_argument("decode_gemv takes one form of input norm, not two");
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.in_norm_weight, DataType::kFP32, "decode_gemv input norm weight"));
    if (g.in_norm_weight->numel() != cols) {
      return invalid_argument("decode_gemv input norm weight " + g.in_norm_weight->describe() +
                              " does not fit weight " + w.values.describe());
    }
    a.in_norm_weight = g.in_norm_weight->data<float>();
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
  if (g.in_quantized != nullptr) {
    if (g.in_norm_weight != nullptr) {
      return invalid_argument("decode_gemv: x handed on quantized comes with its sums of squares, not its norm's weight");
    }
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.in_quantized, DataType::kINT8, "decode_gemv quantized input"));
    if (cols % kInt8InputBlock != 0 || g.in_quantized->numel() != decode_quantized_x_bytes(cols)) {
      return invalid_argument("decode_gemv quantized input " + g.in_quantized->describe() + " does not fit weight " +
                              w.values.describe());
    }
    // Only the readers that multiply in integers read it (GemvKernelChoice::reads_halves); the
    // others take x in fp32 from `in`.
    if (w.is_quantized()) a.x_int8 = g.in_quantized->raw_data();
  }
  if (g.out_quantized != nullptr) {
    const bool swiglu = g.epilogue == GemvEpilogue::kSwiglu;
    const int64_t n = swiglu ? rows / 2 : rows;
    if (!w.is_quantized() || !(swiglu || g.next_norm_weight != nullptr) || n % kInt8InputBlock != 0) {
      return unsupported("decode_gemv writes its output quantized only from int8 or int4 weights, for swiglu or an "
                         "accumulate that hands a norm on, 32 outputs at a time; got " + w.values.describe());
    }
    KUIPER_RETURN_IF_ERROR(expect_cuda(*g.out_quantized, DataType::kINT8, "decode_gemv quantized output"));
    if (g.out_quantized->numel() != decode_quantized_x_bytes(n)) {
      return invalid_argument("decode_gemv quantized output " + g.out_quantized->describe() + " does not fit " +
                              std::to_string(n) + " outputs");
    }
    a.out_int8 = g.out_quantized->raw_data();
  }
  a.w = w.values.raw_data();
  a.x = g.in->data<float>();
  a.rows = static_cast<int>(rows);
  a.cols = static_cast<int>(cols);
  a.out = g.out->data<float>();
  if (w.is_quantized()) set_weight_groups(a, w);
  switch (g.epilogue) {
    case GemvEpilogue::kStore:
    case GemvEpilogue::kAccumulate:
      if (g.out->numel() == rows) return ok_status();
      break;
    case GemvEpilogue::kSwiglu:
      if (rows % 2 == 0 && g.out->numel() == rows / 2) return ok_status();
      break;
    case GemvEpilogue::kRopeKv:
      if (g.rope_kv.slots != nullptr) {
        return unsupported("the decode GEMV stores keys and values at their positions; slots take the unfused path");
      }
      return rope_kv_args(g.rope_kv, rows, 1, *g.out, a.rope);
  }
  return invalid_argument("decode_gemv output " + g.out->describe() + " does not fit weight " +
                          w.values.describe() + " and its epilogue");
}

// The warp kernel's readers that take x in fp32 read it a warp at a time, never all of it in one
// block, so they cannot sum x's squares as they read: an input they should normalize is
// normalized into scratch first.
Status normalize_first(const DecodeGemv& g, DecodeGemvArgs& a, const ExecutionContext& ctx) {
  const size_t bytes = g.in->nbytes();
  KUIPER_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(ScratchUse::kNormedInput, bytes));
  KUIPER_ASSIGN_OR_RETURN(Tensor normed, Tensor::view(Buffer::borrow(scratch, bytes, DeviceType::kCUDA, nullptr), 0,
                                                      DataType::kFP32, g.in->shape()));
  KUIPER_RETURN_IF_ERROR(rmsnorm(*g.in, *g.in_norm_weight, g.norm_eps, normed, ctx));
  a.x = normed.data<float>();
  a.in_norm_weight = nullptr;
  return ok_status();
}

// The kernel and reader decode_gemv takes for `weight` with `epilogue`, for x in an aligned buffer
// (as a model's activations are).
GemvKernelChoice choice_for(const Weight& weight, GemvEpilogue epilogue) {
  DecodeGemvArgs a;
  a.w = weight.values.raw_data();
  a.x = static_cast<const float*>(a.w);
  a.rows = static_cast<int>(weight.rows());
  a.cols = static_cast<int>(weight.cols());
  a.group_size = weight.group_size;
  a.group_shift = chunk_group_shift(weight.group_size);
  return choose_gemv_kernel(weight.dtype(), a, epilogue);
}

}  // namespace

bool decode_gemv_reads_quantized(const Weight& weight) {
  return weight.is_quantized() && choice_for(weight, GemvEpilogue::kStore).reads_halves;
}

bool decode_gemv_quantizes_output(const Weight& weight, GemvEpilogue epilogue) {
  const bool swiglu = epilogue == GemvEpilogue::kSwiglu;
  if (!weight.is_quantized() || !(swiglu || epilogue == GemvEpilogue::kAccumulate)) return false;
  if ((swiglu ? weight.rows() / 2 : weight.rows()) % kInt8InputBlock != 0) return false;
  // Whether or not its own x comes quantized.
  const GemvRowReader reader = choice_for(weight, epilogue).reader;
  return quantizes_outputs(weight.dtype(), reader, false, epilogue) &&
         quantizes_outputs(weight.dtype(), reader, true, epilogue);
}

Status decode_gemv(const DecodeGemv& gemv, const ExecutionContext& ctx) {
  DecodeGemvArgs a;
  KUIPER_RETURN_IF_ERROR(check_and_fill(gemv, a));
  const cudaStream_t s = as_cuda_stream(ctx.stream());
  const DataType dtype = gemv.weight->dtype();
  const GemvKernelChoice choice = choose_gemv_kernel(dtype, a, gemv.epilogue);
  const bool sums_here = choice.normalizes_x && aligned_to(a.in_norm_weight, 16);
  if (a.in_norm_weight != nullptr && gemv.epilogue != GemvEpilogue::kAccumulate && !sums_here) {
    KUIPER_RETURN_IF_ERROR(normalize_first(gemv, a, ctx));
  }
  if (gemv.weight->is_quantized()) {
    return launch_quantized(dtype, a, choice, gemv.epilogue, cuda_backend(ctx).multiprocessors, s);
  }
  return dispatch_float_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    return choice.kernel == GemvKernel::kOnePass ? launch_one_pass<T>(a, gemv.epilogue, s)
                                                 : launch_dense<T>(a, choice.reader, gemv.epilogue, s);
  });
}

}  // namespace kuiper::op::cuda
