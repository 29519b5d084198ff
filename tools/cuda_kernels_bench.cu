// Kernel benchmark for the CUDA backend, on LLaMA-7B/8B shapes:
//  - the ceiling: device-to-device copy bandwidth (bytes read + written) of a 1 GiB cudaMemcpy;
//  - decode GEMV (bf16, fp16, fp32 weights) through the kernel table, with the weights rotated
//    among copies that together exceed the L2 cache, also replayed from a CUDA graph, and other
//    burst depths for reference;
//  - decode int8 GEMV (bytes counted: int8 weights + fp16 scales), with other rows-per-warp,
//    burst depths and blocks per multiprocessor for reference;
//  - decode int4 GEMV, groups of 32 with a minimum (bytes counted: packed weights + fp16 scales
//    and mins), with other rows-per-warp, burst depths and blocks per multiprocessor, and reading
//    x quantized once instead of in every block, for reference;
//  - batched-decode int8, int4 (with mins, and symmetric) matmul at T = 8 .. 64 tokens (the
//    multi-token GEMV, then the tensor-core GEMM for quantized weights), beside the bf16 GEMM of
//    the same shape (bytes: weights, scales and mins once, plus the fp32 input and output rows);
//    `cuda_kernels_bench batched` runs these alone;
//  - `cuda_kernels_bench epilogues` alone: the symmetric int4 decode GEMV with and without the
//    model's input norm, swiglu pairing and residual accumulate;
//  - decode attention over a bf16 cache, paged decode attention of several sequences (the
//    engine's batched decode), prefill attention (tensor cores, and the CUDA-core kernel it
//    replaced), and the prefill GEMM.
// Every time is the median of several batches timed with CUDA events, after a warm-up.
// Target cuda_kernels_bench (CUDA builds); scripts/cuda_kernels_run.sh runs it on the GPU machine.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/base/device.h"
#include "kuiper/op/kernel_table.h"
#include "kuiper/base/buffer.h"
#include "kuiper/op/kernels/cuda/decode_gemv_int8_input_rows.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_one_pass_kernel.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_warp_kernel.cuh"

namespace kuiper {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

// Uniform values in [-1, 1) from a hash of the index: random-looking, never all zeros.
template <typename T>
__global__ void fill_kernel(T* data, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    data[i] = op::cuda::from_float<T>(static_cast<float>(h) / 2147483648.f - 1.f);
  }
}

Tensor random_gpu(DataType dtype, Shape shape, uint32_t seed) {
  auto t = Tensor::empty(dtype, std::move(shape), *cuda_allocator().value());
  check(t.status(), "allocate");
  const int64_t n = t->numel();
  switch (dtype) {
    case DataType::kFP32: fill_kernel<<<4096, 256>>>(t->data<float>(), n, seed); break;
    case DataType::kFP16: fill_kernel<<<4096, 256>>>(t->data<__half>(), n, seed); break;
    case DataType::kBF16: fill_kernel<<<4096, 256>>>(t->data<__nv_bfloat16>(), n, seed); break;
    default: std::exit(1);
  }
  check(cudaGetLastError(), "fill");
  return std::move(t).value();
}

// The context every timed kernel runs in, with scratch for the largest shape timed here.
const op::ExecutionContext& ctx() {
  static const op::ExecutionContext* context = [] {
    op::ScratchPlan plan;
    plan[op::ScratchUse::kGemmInput] = size_t{256} << 20;
    plan[op::ScratchUse::kDequantizedWeight] = size_t{1} << 30;
    plan[op::ScratchUse::kAttentionPartials] = size_t{64} << 20;
    auto made = op::ExecutionContext::create(DeviceType::kCUDA, plan);
    check(made.status(), "execution context");
    return made->release();
  }();
  return *context;
}

// Median over `reps` batches of the time of one call (ms); `call(i)` runs call number i on the
// context's stream.
double median_ms(const std::function<void(int)>& call, int batch, int reps = 9) {
  const cudaStream_t stream = as_cuda_stream(ctx().stream());
  // Inputs were made on the default stream, which the context's non-blocking stream does not
  // wait for.
  check(cudaDeviceSynchronize(), "inputs");
  for (int i = 0; i < batch; ++i) call(i);  // warm-up
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> times;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(start, stream), "record");
    for (int i = 0; i < batch; ++i) call(r * batch + i);
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms / batch);
  }
  check(cudaGetLastError(), "timed kernels");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Time of one call when `calls` calls are captured in a CUDA graph and replayed: what a
// captured decode step sees, without per-launch CPU overhead.
double graph_median_us(const std::function<void(int)>& call, int calls) {
  const cudaStream_t stream = as_cuda_stream(ctx().stream());
  call(0);  // first use outside the capture (kernel attributes are set on first launch)
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
  for (int i = 0; i < calls; ++i) call(i);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double ms = median_ms([&](int) { check(cudaGraphLaunch(exec, stream), "replay"); }, 1, 9);
  check(cudaStreamSynchronize(stream), "sync");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 1e3 * ms / calls;
}

// Enough weight copies that rotating among them defeats the L2 cache (50-60 MB).
int copies_for(size_t bytes) { return std::max<int>(2, static_cast<int>(240'000'000 / bytes) + 1); }

struct Row {
  std::string what;
  double us, gbs, pct;
};

// The decode GEMV kernel `launch` (a launch_decode_gemv or launch_decode_gemv_one_pass
// instantiation) with another way of reading rows or a fused prologue/epilogue, launched directly.
using GemvLaunch = cudaError_t (*)(const op::cuda::DecodeGemvArgs&, cudaStream_t);
// `before`, where given, is launched ahead of each call (x_int8: its output, the kernel's input).
template <op::GemvEpilogue kEpi, op::cuda::InputNorm kNorm>
double gemv_launch_us(GemvLaunch launch, const std::vector<op::Weight>& ws, const Tensor& x, Tensor& y,
                      GemvLaunch before = nullptr, void* x_int8 = nullptr) {
  op::cuda::DecodeGemvArgs a;
  a.rows = static_cast<int>(ws[0].rows());
  a.cols = static_cast<int>(ws[0].cols());
  a.x = x.data<float>();
  a.x_int8 = x_int8;
  a.out = y.data<float>();
  // A norm-fed GEMV reads sums of squares, or the norm's weights, and writes nothing more; an
  // accumulate hands a norm on.
  const Tensor sumsq = random_gpu(DataType::kFP32, {op::decode_sumsq_runs(a.cols)}, 9);
  const Tensor norm_weight = random_gpu(DataType::kFP32, {a.cols}, 12);
  Tensor next_normed = random_gpu(DataType::kFP32, {a.rows}, 10);
  Tensor next_sumsq = random_gpu(DataType::kFP32, {op::decode_sumsq_runs(a.rows)}, 11);
  a.eps = 1e-5f;
  if (kNorm == op::cuda::InputNorm::kGivenSums) {
    a.in_sumsq = sumsq.data<float>();
    a.sumsq_runs = static_cast<int>(op::decode_sumsq_runs(a.cols));
  }
  if (kNorm == op::cuda::InputNorm::kSummedHere) a.in_norm_weight = norm_weight.data<float>();
  if (kEpi == op::GemvEpilogue::kAccumulate) {
    a.next_norm_weight = y.data<float>();  // any fp32 values of the output's length
    a.next_normed = next_normed.data<float>();
    a.next_sumsq = next_sumsq.data<float>();
  }
  return 1e3 * median_ms([&](int i) {
    const op::Weight& w = ws[i % ws.size()];
    a.w = w.values.raw_data();
    if (w.is_quantized()) op::cuda::set_weight_groups(a, w);
    if (before != nullptr) check(before(a, as_cuda_stream(ctx().stream())), "before gemv");
    check(launch(a, as_cuda_stream(ctx().stream())), "gemv");
  }, 60);
}

// The warp kernel reading rows as Rows does.
template <typename Rows, op::GemvEpilogue kEpi = op::GemvEpilogue::kStore, bool kNorm = false>
double gemv_variant_us(const std::vector<op::Weight>& ws, const Tensor& x, Tensor& y) {
  constexpr auto norm = kNorm ? op::cuda::InputNorm::kGivenSums : op::cuda::InputNorm::kNone;
  return gemv_launch_us<kEpi, norm>(op::cuda::launch_decode_gemv<Rows, kEpi, kNorm>, ws, x, y);
}

// x quantized once into a.x_int8 (one token), as the multi-token GEMV does.
cudaError_t quantize_one_token(const op::cuda::DecodeGemvArgs& a, cudaStream_t stream) {
  const dim3 grid((a.cols / 4 + op::cuda::kQuantizeThreads - 1) / op::cuda::kQuantizeThreads, 1);
  return op::cuda::launch_overlapped(op::cuda::quantize_tokens_kernel, grid, dim3(op::cuda::kQuantizeThreads), 0,
                                     stream, a.x, static_cast<uint4*>(const_cast<void*>(a.x_int8)), a.cols);
}

// The one-token int4 GEMV reading x quantized once (TokenChunks of one token) instead of
// quantizing it in every block: alone, as if the kernel that writes x had quantized it, or
// (kQuantize) after quantize_tokens_kernel.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm, bool kQuantize>
double gemv_quantized_once_us(const std::vector<op::Weight>& ws, const Tensor& x, Tensor& y) {
  using Rows = op::cuda::TokenChunks<op::cuda::Int4Units, kRowsPerWarp, kBurstLoads, 1, kMinBlocksPerSm>;
  const int64_t bytes = static_cast<int64_t>(op::cuda::quantized_tokens_bytes(1, static_cast<int>(x.numel())));
  Tensor x_int8 = Tensor::empty(DataType::kINT8, {bytes}, *cuda_allocator().value()).value();
  op::cuda::DecodeGemvArgs a;
  a.x = x.data<float>();
  a.x_int8 = x_int8.raw_data();
  a.cols = static_cast<int>(x.numel());
  check(quantize_one_token(a, as_cuda_stream(ctx().stream())), "quantize x");
  return gemv_launch_us<op::GemvEpilogue::kStore, op::cuda::InputNorm::kNone>(
      op::cuda::launch_decode_gemv<Rows, op::GemvEpilogue::kStore, false>, ws, x, y,
      kQuantize ? quantize_one_token : nullptr, x_int8.raw_data());
}

// x quantized in halves of 16, as a GEMV before hands it on (QuantizedHalves): one value a thread.
__global__ void quantize_halves_kernel(const float* x, void* out, int n) {
  const int index = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  op::cuda::quantize_half(index < n ? x[index] : 0.f, index, index < n, op::cuda::int8_halves_at(out, n));
}

// The one-token int4 GEMV reading x handed on quantized in halves (Int4HalvesChunks), with the
// epilogue and norm of gemv_variant_us.
template <int kRowsPerWarp, int kBurstLoads, int kMinBlocksPerSm,
          op::GemvEpilogue kEpi = op::GemvEpilogue::kStore, bool kNorm = false>
double gemv_halves_us(const std::vector<op::Weight>& ws, const Tensor& x, Tensor& y) {
  using Rows = op::cuda::Int4HalvesChunks<kRowsPerWarp, kBurstLoads, kMinBlocksPerSm>;
  const int n = static_cast<int>(x.numel());
  Tensor halves = Tensor::empty(DataType::kINT8, {op::decode_quantized_x_bytes(n)}, *cuda_allocator().value()).value();
  quantize_halves_kernel<<<(n + 255) / 256, 256, 0, as_cuda_stream(ctx().stream())>>>(x.data<float>(), halves.raw_data(), n);
  check(cudaGetLastError(), "quantize halves");
  constexpr auto norm = kNorm ? op::cuda::InputNorm::kGivenSums : op::cuda::InputNorm::kNone;
  return gemv_launch_us<kEpi, norm>(op::cuda::launch_decode_gemv<Rows, kEpi, kNorm>, ws, x, y, nullptr,
                                    halves.raw_data());
}

// The one-pass kernel, kRows rows of T per block.
template <typename T, int kRows, op::GemvEpilogue kEpi = op::GemvEpilogue::kStore,
          op::cuda::InputNorm kNorm = op::cuda::InputNorm::kNone>
double gemv_one_pass_us(const std::vector<op::Weight>& ws, const Tensor& x, Tensor& y) {
  return gemv_launch_us<kEpi, kNorm>(op::cuda::launch_decode_gemv_one_pass<T, kRows, kEpi, kNorm>, ws, x, y);
}

// Uniform int8 weights in [-127, 127] and scales in [0.001, 0.02], from the fp32 fill.
__global__ void int8_from_float_kernel(const float* in, int8_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<int8_t>(__float2int_rn(in[i] * 127.f));
  }
}

op::Weight random_int8_weight(int64_t rows, int64_t cols, int group, uint32_t seed) {
  const Tensor values_f = random_gpu(DataType::kFP32, {rows, cols}, seed);
  auto values = Tensor::empty(DataType::kINT8, {rows, cols}, *cuda_allocator().value());
  check(values.status(), "allocate int8");
  int8_from_float_kernel<<<4096, 256>>>(values_f.data<float>(), values->data<int8_t>(), rows * cols);
  check(cudaGetLastError(), "int8 fill");
  Tensor scales = random_gpu(DataType::kFP16, {rows * cols / group}, seed + 1);
  return {std::move(values).value(), std::move(scales), group};
}

// Random packed int4 bytes (every byte is two valid nibbles), fp16 scales and mins per group of
// `group`.
__global__ void bytes_from_float_kernel(const float* in, uint8_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<uint8_t>(__float2int_rn(in[i] * 127.f) + 128);
  }
}

op::Weight random_int4_weight(int64_t rows, int64_t cols, int group, uint32_t seed, bool with_min = true) {
  const Tensor bytes_f = random_gpu(DataType::kFP32, {rows, cols / 2}, seed);
  auto values = Tensor::empty(DataType::kINT4, {rows, cols / 2}, *cuda_allocator().value());
  check(values.status(), "allocate int4");
  bytes_from_float_kernel<<<4096, 256>>>(bytes_f.data<float>(), static_cast<uint8_t*>(values->raw_data()),
                                         rows * cols / 2);
  check(cudaGetLastError(), "int4 fill");
  Tensor scales = random_gpu(DataType::kFP16, {rows * cols / group}, seed + 1);
  Tensor mins = with_min ? random_gpu(DataType::kFP16, {rows * cols / group}, seed + 2) : Tensor();
  return {std::move(values).value(), std::move(scales), group, std::move(mins)};
}

// The bytes a decode reads of one weight: its values, and its scales and minimums where it has them.
size_t stored_bytes(const op::Weight& w) {
  size_t bytes = w.values.nbytes();
  for (const Tensor* t : {&w.scales, &w.mins}) bytes += t->is_empty() ? 0 : t->nbytes();
  return bytes;
}

// make(0), make(1), ...: copies of one weight that together defeat the L2 cache (copies_for).
template <typename Make>
std::vector<op::Weight> rotated_copies(Make&& make) {
  std::vector<op::Weight> ws;
  ws.push_back(make(0));
  const int copies = copies_for(stored_bytes(ws[0]));
  for (int k = 1; k < copies; ++k) ws.push_back(make(k));
  return ws;
}

// µs of one call of the kernel table's matmul for `dtype`, the weights rotated among `ws` (copies
// that together exceed the L2 cache), the median of batches of `batch` calls.
double table_matmul_us(DataType dtype, const std::vector<op::Weight>& ws, const Tensor& x, Tensor& y, int batch) {
  const auto matmul = op::kernel_table(DeviceType::kCUDA).matmul[static_cast<int>(dtype)];
  return 1e3 * median_ms([&](int i) { check(matmul(x, ws[i % ws.size()], y, ctx()), "matmul"); }, batch);
}

// The rows, with the share of the copy bandwidth where a row has none of its own.
void print_rows(std::vector<Row>& rows, double copy_gbs) {
  for (Row& r : rows) if (r.pct == 0) r.pct = 100.0 * r.gbs / copy_gbs;
  std::printf("\n%-44s %10s %10s %8s\n", "decode kernel", "us", "GB/s", "% copy");
  for (const Row& r : rows) {
    std::printf("%-44s %10.2f %10.0f %7.1f%%\n", r.what.c_str(), r.us, r.gbs, r.pct);
  }
}

// Batched decode: T tokens through the table's int8 (groups of 64) and int4 (groups of 32, with
// mins and symmetric) matmul on LLaMA-2-7B's matrices (q|k|v, o, gate|up, down), which takes the
// multi-token GEMV for T = 8 and the tensor-core GEMM (quantized_mma.cu) for T = 16-64, beside
// the bf16 GEMM (cuBLAS) of the same shape, what a bf16 model runs. Bytes: the weights (and
// scales and mins) once, and the T rows of fp32 input and output. `cuda_kernels_bench batched`
// prints these alone, with the copy bandwidth.
void add_batched_rows(std::vector<Row>& rows) {
  struct Scheme {
    const char* name;
    DataType dtype;
    bool with_min;
  };
  for (auto [r, c] : {std::pair<int64_t, int64_t>{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}}) {
    for (const Scheme& scheme : {Scheme{"int8", DataType::kINT8, false}, Scheme{"int4 with mins", DataType::kINT4, true},
                                 Scheme{"int4 symmetric", DataType::kINT4, false},
                                 Scheme{"bf16", DataType::kBF16, false}}) {
      const DataType dtype = scheme.dtype;
      const int group = dtype == DataType::kINT8 ? 64 : 32;
      const std::vector<op::Weight> ws = rotated_copies([&](int k) {
        return dtype == DataType::kINT8   ? random_int8_weight(r, c, group, 700 + 2 * k)
               : dtype == DataType::kINT4 ? random_int4_weight(r, c, group, 800 + 3 * k, scheme.with_min)
                                          : op::Weight{random_gpu(DataType::kBF16, {r, c}, 900 + k), {}, 0};
      });
      const size_t bytes = stored_bytes(ws[0]);
      for (const int64_t tokens : {8, 16, 32, 64}) {
        const Tensor x = random_gpu(DataType::kFP32, {tokens, c}, 22);
        Tensor y = random_gpu(DataType::kFP32, {tokens, r}, 23);
        const double us = table_matmul_us(dtype, ws, x, y, 30);
        rows.push_back({"batched " + std::string(scheme.name) + " " + std::to_string(r) + "x" + std::to_string(c) +
                            " T=" + std::to_string(tokens),
                        us, (bytes + 4.0 * tokens * (r + c)) / (us * 1e-6) / 1e9, 0});
      }
    }
  }
}

// `cuda_kernels_bench attention`: three decode-attention calls (LLaMA-2-7B heads, 4096 of 4096
// rows) and nothing else, for a profiler.
void profile_attention() {
  const op::AttentionShape shape{32, 32, 128};
  const Tensor k = random_gpu(DataType::kBF16, {4096, 4096}, 1);
  const Tensor v = random_gpu(DataType::kBF16, {4096, 4096}, 2);
  const Tensor q = random_gpu(DataType::kFP32, {1, 4096}, 3);
  Tensor out = random_gpu(DataType::kFP32, {1, 4096}, 4);
  Tensor pos = Tensor::empty(DataType::kINT32, {1}, *cuda_allocator().value()).value();
  const int32_t last = 4095;
  check(copy_bytes(pos.raw_data(), DeviceType::kCUDA, &last, DeviceType::kCPU, 4), "pos");
  for (int i = 0; i < 3; ++i) {
    check(op::kernel_table(DeviceType::kCUDA).attention[static_cast<int>(DataType::kBF16)](
              q, k, v, pos, shape, out, ctx()),
          "attention");
  }
  check(synchronize(nullptr), "sync");
}

// What the int4 decode GEMV's epilogues and input norm cost: symmetric int4 (CUDA's default
// scheme), x handed on in halves, on LLaMA-2-7B's w1|w3, half of it, wo and w2, each layout the
// model takes run with and without its norm, pairing and residual.
void add_int4_epilogue_rows(std::vector<Row>& rows) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{22016, 4096}, {11008, 4096}, {4096, 4096}, {4096, 11008}}) {
    const std::vector<op::Weight> ws =
        rotated_copies([&](int k) { return random_int4_weight(r, c, 32, 600 + 3 * k, false); });
    const size_t bytes = stored_bytes(ws[0]);
    const Tensor x = random_gpu(DataType::kFP32, {1, c}, 20);
    Tensor y = random_gpu(DataType::kFP32, {1, r}, 21);
    const std::string name = "sym int4 " + std::to_string(r) + "x" + std::to_string(c);
    using E = op::GemvEpilogue;
    for (auto [label, t] : {std::pair{" store 4x1 3b", gemv_halves_us<4, 1, 3>(ws, x, y)},
                            std::pair{" store+norm 4x1 3b", gemv_halves_us<4, 1, 3, E::kStore, true>(ws, x, y)},
                            std::pair{" swiglu 4x1 3b", gemv_halves_us<4, 1, 3, E::kSwiglu, false>(ws, x, y)},
                            std::pair{" swiglu+norm 4x1 3b", gemv_halves_us<4, 1, 3, E::kSwiglu, true>(ws, x, y)},
                            std::pair{" swiglu+norm 4x1 2b", gemv_halves_us<4, 1, 2, E::kSwiglu, true>(ws, x, y)},
                            std::pair{" store 2x2", gemv_halves_us<2, 2, 2>(ws, x, y)},
                            std::pair{" accumulate 2x2", gemv_halves_us<2, 2, 2, E::kAccumulate, false>(ws, x, y)}}) {
      rows.push_back({name + label, t, (bytes + 4.0 * (r + c)) / (t * 1e-6) / 1e9, 0});
    }
  }
}

}  // namespace
}  // namespace kuiper

int main(int argc, char** argv) {
  using namespace kuiper;
  if (!cuda_available()) {
    std::printf("no GPU: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "attention") {
    profile_attention();
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  const op::KernelTable& table = op::kernel_table(DeviceType::kCUDA);
  const StatusOr<double> copy = cuda_copy_bandwidth_gbs(size_t{1} << 30);
  check(copy.status(), "copy bandwidth");
  const double copy_gbs = copy.value();
  std::vector<Row> rows;
  rows.push_back({"d2d copy 1 GiB (read+write)", 0, copy_gbs, 100});
  // Modes that print one group of rows alone.
  for (const auto& [mode, add_rows] :
       {std::pair{"batched", &add_batched_rows}, std::pair{"epilogues", &add_int4_epilogue_rows}}) {
    if (argc > 1 && std::string(argv[1]) == mode) {
      add_rows(rows);
      print_rows(rows, copy_gbs);
      return 0;
    }
  }

  // Decode GEMV through the table.
  struct Shape2 { int64_t rows, cols; DataType dtype; };
  const Shape2 shapes[] = {{4096, 4096, DataType::kBF16},  {12288, 4096, DataType::kBF16},
                           {22016, 4096, DataType::kBF16}, {4096, 11008, DataType::kBF16},
                           {32000, 4096, DataType::kBF16}, {28672, 4096, DataType::kBF16},
                           {4096, 4096, DataType::kFP16},
                           {4096, 4096, DataType::kFP32}};
  for (const Shape2& s : shapes) {
    const std::vector<op::Weight> ws =
        rotated_copies([&](int k) { return op::Weight{random_gpu(s.dtype, {s.rows, s.cols}, 100 + k), {}, 0}; });
    const size_t bytes = stored_bytes(ws[0]);
    const Tensor x = random_gpu(DataType::kFP32, {1, s.cols}, 7);
    Tensor y = random_gpu(DataType::kFP32, {1, s.rows}, 8);
    const auto matmul = table.matmul[static_cast<int>(s.dtype)];
    const double us = table_matmul_us(s.dtype, ws, x, y, 60);
    const double moved = bytes + 4.0 * (s.rows + s.cols);
    const std::string name = "gemv " + std::string(dtype_name(s.dtype)) + " " +
                             std::to_string(s.rows) + "x" + std::to_string(s.cols);
    rows.push_back({name, us, moved / (us * 1e-6) / 1e9, 0});
    if (s.dtype == DataType::kBF16) {
      const double graph_us = graph_median_us([&](int i) {
        check(matmul(x, ws[i % ws.size()], y, ctx()), "matmul in graph");
      }, 60);
      rows.push_back({name + " graph", graph_us, moved / (graph_us * 1e-6) / 1e9, 0});
    }
    if (s.dtype == DataType::kBF16) {
      using B = __nv_bfloat16;
      using op::cuda::DenseChunks;
      using Rows = DenseChunks<B, 4>;
      using Paired = DenseChunks<B, 2, 2>;
      using E = op::GemvEpilogue;
      using N = op::cuda::InputNorm;
      const auto add = [&](const char* label, double t) {
        rows.push_back({name + label, t, moved / (t * 1e-6) / 1e9, 0});
      };
      add("  1 row x 2", gemv_variant_us<DenseChunks<B, 2>>(ws, x, y));
      add("  1 row x 4", gemv_variant_us<Rows>(ws, x, y));
      add("  1 row x 8", gemv_variant_us<DenseChunks<B, 8>>(ws, x, y));
      add("  2 rows x 2", gemv_variant_us<Paired>(ws, x, y));
      add("  2 rows x 4", gemv_variant_us<DenseChunks<B, 4, 2>>(ws, x, y));
      add("  norm+store, 1 row x 4", gemv_variant_us<Rows, E::kStore, true>(ws, x, y));
      add("  accumulate+norm, 1 row x 4", gemv_variant_us<Rows, E::kAccumulate, false>(ws, x, y));
      add("  norm+swiglu, 2 rows x 2", gemv_variant_us<Paired, E::kSwiglu, true>(ws, x, y));
      if (s.cols / op::cuda::kChunkElems<B> <= op::cuda::kOnePassMaxChunks) {
        add("  one pass, 2 rows", gemv_one_pass_us<B, 2>(ws, x, y));
        add("  one pass, 8 rows", gemv_one_pass_us<B, 8>(ws, x, y));
        add("  one pass, norm+store, 8 rows", gemv_one_pass_us<B, 8, E::kStore, N::kGivenSums>(ws, x, y));
        add("  one pass, norm+swiglu, 2 rows", gemv_one_pass_us<B, 2, E::kSwiglu, N::kGivenSums>(ws, x, y));
        add("  one pass, norm from x+swiglu, 2 rows", gemv_one_pass_us<B, 2, E::kSwiglu, N::kSummedHere>(ws, x, y));
      }
    }
  }

  // Quantized decode GEMVs on LLaMA-2-7B's matrices, LLaMA-3-8B's 6144-row q|k|v, its 14336-row
  // gate and up and the classifier, through the table, each weight rotated among copies that
  // exceed the L2 cache. The "paired" rows run the norm + swiglu epilogue, which reads rows two
  // by two as rope does.
  const std::pair<int64_t, int64_t> quantized_shapes[] = {{4096, 4096},  {6144, 4096},  {11008, 4096},
                                                          {4096, 11008}, {14336, 4096}, {32000, 4096}};

  // int8 (group 64), and other shapes of the kernel.
  for (auto [r, c] : quantized_shapes) {
    const int group = 64;
    const std::vector<op::Weight> ws =
        rotated_copies([&](int k) { return random_int8_weight(r, c, group, 400 + 2 * k); });
    const size_t bytes = stored_bytes(ws[0]);
    const Tensor x = random_gpu(DataType::kFP32, {1, c}, 18);
    Tensor y = random_gpu(DataType::kFP32, {1, r}, 19);
    const double us = table_matmul_us(DataType::kINT8, ws, x, y, 60);
    const double moved = bytes + 4.0 * (r + c);
    const std::string name = "gemv int8 " + std::to_string(r) + "x" + std::to_string(c);
    rows.push_back({name, us, moved / (us * 1e-6) / 1e9, 0});
    using op::cuda::Int8Chunks;
    using op::cuda::Int8Int8Chunks;
    using op::cuda::SplitColumns;
    for (auto [label, t] : {std::pair{"  fp32 widening, 4 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int8Chunks<4, 1>, 2>>(ws, x, y)},
                            std::pair{"  fp32 widening, 4 rows x 1, 3 blocks", gemv_variant_us<Int8Chunks<4, 1, 3>>(ws, x, y)},
                            std::pair{"  1 row x 2", gemv_variant_us<Int8Int8Chunks<1, 2>>(ws, x, y)},
                            std::pair{"  1 row x 4", gemv_variant_us<Int8Int8Chunks<1, 4>>(ws, x, y)},
                            std::pair{"  2 rows x 1", gemv_variant_us<Int8Int8Chunks<2, 1>>(ws, x, y)},
                            std::pair{"  2 rows x 2", gemv_variant_us<Int8Int8Chunks<2, 2>>(ws, x, y)},
                            std::pair{"  2 rows x 1, 3 blocks", gemv_variant_us<Int8Int8Chunks<2, 1, 3>>(ws, x, y)},
                            std::pair{"  4 rows x 1", gemv_variant_us<Int8Int8Chunks<4, 1>>(ws, x, y)},
                            std::pair{"  4 rows x 1, 3 blocks", gemv_variant_us<Int8Int8Chunks<4, 1, 3>>(ws, x, y)},
                            std::pair{"  2 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int8Int8Chunks<2, 1>, 2>>(ws, x, y)},
                            std::pair{"  2 rows x 2, columns in 2", gemv_variant_us<SplitColumns<Int8Int8Chunks<2, 2>, 2>>(ws, x, y)},
                            std::pair{"  4 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int8Int8Chunks<4, 1>, 2>>(ws, x, y)},
                            std::pair{"  4 rows x 1, columns in 4", gemv_variant_us<SplitColumns<Int8Int8Chunks<4, 1>, 4>>(ws, x, y)},
                            std::pair{"  2 rows x 1, columns in 2, accumulate+norm", gemv_variant_us<SplitColumns<Int8Int8Chunks<2, 1>, 2>, op::GemvEpilogue::kAccumulate, false>(ws, x, y)},
                            std::pair{"  4 rows x 1, columns in 2, accumulate+norm", gemv_variant_us<SplitColumns<Int8Int8Chunks<4, 1>, 2>, op::GemvEpilogue::kAccumulate, false>(ws, x, y)},
                            std::pair{"  paired, fp32 widening, 2 rows x 2", gemv_variant_us<Int8Chunks<2, 2>, op::GemvEpilogue::kSwiglu, true>(ws, x, y)},
                            std::pair{"  paired, fp32 widening, 4 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int8Chunks<4, 1>, 2>, op::GemvEpilogue::kSwiglu, true>(ws, x, y)},
                            std::pair{"  paired, integers, 4 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int8Int8Chunks<4, 1>, 2>, op::GemvEpilogue::kSwiglu, true>(ws, x, y)}}) {
      rows.push_back({name + label, t, moved / (t * 1e-6) / 1e9, 0});
    }
  }

  // int4 (groups of 32 with a minimum), and other layouts of its reader.
  for (auto [r, c] : quantized_shapes) {
    const int group = 32;
    const std::vector<op::Weight> ws =
        rotated_copies([&](int k) { return random_int4_weight(r, c, group, 600 + 3 * k); });
    const size_t bytes = stored_bytes(ws[0]);
    const Tensor x = random_gpu(DataType::kFP32, {1, c}, 20);
    Tensor y = random_gpu(DataType::kFP32, {1, r}, 21);
    const double us = table_matmul_us(DataType::kINT4, ws, x, y, 60);
    const double moved = bytes + 4.0 * (r + c);
    const std::string name = "gemv int4 " + std::to_string(r) + "x" + std::to_string(c);
    rows.push_back({name, us, moved / (us * 1e-6) / 1e9, 0});
    using op::cuda::Int4Int8Chunks;
    using op::cuda::SplitColumns;
    for (auto [label, t] : {std::pair{"  1 row x 4", gemv_variant_us<Int4Int8Chunks<1, 4>>(ws, x, y)},
                            std::pair{"  2 rows x 2", gemv_variant_us<Int4Int8Chunks<2, 2>>(ws, x, y)},
                            std::pair{"  4 rows x 1", gemv_variant_us<Int4Int8Chunks<4, 1>>(ws, x, y)},
                            std::pair{"  4 rows x 1, 3 blocks", gemv_variant_us<Int4Int8Chunks<4, 1, 3>>(ws, x, y)},
                            std::pair{"  4 rows x 2", gemv_variant_us<Int4Int8Chunks<4, 2>>(ws, x, y)},
                            std::pair{"  4 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int4Int8Chunks<4, 1>, 2>>(ws, x, y)},
                            std::pair{"  4 rows x 1, columns in 2, accumulate+norm", gemv_variant_us<SplitColumns<Int4Int8Chunks<4, 1>, 2>, op::GemvEpilogue::kAccumulate, false>(ws, x, y)},
                            std::pair{"  paired, 2 rows x 2", gemv_variant_us<Int4Int8Chunks<2, 2>, op::GemvEpilogue::kSwiglu, true>(ws, x, y)},
                            std::pair{"  paired, 4 rows x 1, columns in 2", gemv_variant_us<SplitColumns<Int4Int8Chunks<4, 1>, 2>, op::GemvEpilogue::kSwiglu, true>(ws, x, y)},
                            std::pair{"  x quantized before, 2 rows x 2", gemv_quantized_once_us<2, 2, 2, false>(ws, x, y)},
                            std::pair{"  x quantized before, 4 rows x 1", gemv_quantized_once_us<4, 1, 2, false>(ws, x, y)},
                            std::pair{"  x quantized before, 4 rows x 1, 3 blocks", gemv_quantized_once_us<4, 1, 3, false>(ws, x, y)},
                            std::pair{"  x quantized before, 2 rows x 4", gemv_quantized_once_us<2, 4, 2, false>(ws, x, y)},
                            std::pair{"  quantize kernel + 2 rows x 2", gemv_quantized_once_us<2, 2, 2, true>(ws, x, y)},
                            std::pair{"  quantize kernel + 4 rows x 1", gemv_quantized_once_us<4, 1, 2, true>(ws, x, y)},
                            std::pair{"  x handed on in halves, 2 rows x 2", gemv_halves_us<2, 2, 2>(ws, x, y)},
                            std::pair{"  x handed on in halves, 4 rows x 1", gemv_halves_us<4, 1, 2>(ws, x, y)},
                            std::pair{"  x handed on in halves, 4 rows x 1, 3 blocks", gemv_halves_us<4, 1, 3>(ws, x, y)},
                            std::pair{"  x handed on in halves, paired, 2 rows x 2", gemv_halves_us<2, 2, 2, op::GemvEpilogue::kSwiglu, true>(ws, x, y)},
                            std::pair{"  x handed on in halves, paired, 4 rows x 1", gemv_halves_us<4, 1, 2, op::GemvEpilogue::kSwiglu, true>(ws, x, y)},
                            std::pair{"  x handed on in halves, paired, 4 rows x 1, 3 blocks", gemv_halves_us<4, 1, 3, op::GemvEpilogue::kSwiglu, true>(ws, x, y)}}) {
      rows.push_back({name + label, t, moved / (t * 1e-6) / 1e9, 0});
    }
  }

  add_batched_rows(rows);

  // Decode attention over a bf16 cache of 4096 rows, LLaMA-2-7B (32/32) and LLaMA-3-8B (32/8)
  // heads; three caches rotated. Bytes: K and V rows up to the length.
  // (kv heads, length, capacity): the short cases show fixed costs (one tile without splits;
  // early-exiting split blocks plus the combine).
  const int attention_cases[][3] = {{32, 64, 64},     {32, 64, 4096},  {32, 1024, 4096},
                                    {32, 4096, 4096}, {8, 1024, 4096}, {8, 4096, 4096}};
  for (const auto& [kv_heads, length, capacity] : attention_cases) {
    {
      const int64_t context = capacity, kv_dim = int64_t{kv_heads} * 128;
      const op::AttentionShape shape{32, kv_heads, 128};
      std::vector<Tensor> ks, vs;
      for (int c = 0; c < 3; ++c) {
        ks.push_back(random_gpu(DataType::kBF16, {context, kv_dim}, 200 + c));
        vs.push_back(random_gpu(DataType::kBF16, {context, kv_dim}, 300 + c));
      }
      const Tensor q = random_gpu(DataType::kFP32, {1, 32 * 128}, 9);
      Tensor out = random_gpu(DataType::kFP32, {1, 32 * 128}, 10);
      Tensor pos = Tensor::empty(DataType::kINT32, {1}, *cuda_allocator().value()).value();
      const int32_t last = length - 1;
      check(copy_bytes(pos.raw_data(), DeviceType::kCUDA, &last, DeviceType::kCPU, 4), "pos");
      const auto attention = table.attention[static_cast<int>(DataType::kBF16)];
      const double us = 1e3 * median_ms([&](int i) {
        check(attention(q, ks[i % 3], vs[i % 3], pos, shape, out, ctx()), "attention");
      }, 50);
      const double graph_us = graph_median_us([&](int i) {
        check(attention(q, ks[i % 3], vs[i % 3], pos, shape, out, ctx()), "attention in graph");
      }, 50);
      const double moved = 2.0 * length * kv_dim * 2;
      const std::string name = "attn decode bf16 kv" + std::to_string(kv_heads) + " len " +
                               std::to_string(length) + " cap " + std::to_string(capacity);
      rows.push_back({name, us, moved / (us * 1e-6) / 1e9, 0});
      rows.push_back({name + " graph", graph_us, moved / (graph_us * 1e-6) / 1e9, 0});
    }
  }

  // Paged decode attention through the table: one row per sequence, each at the last position
  // of its context, blocks of 16 positions in shuffled order over a bf16 pool; LLaMA-2-7B (32/32)
  // and LLaMA-3-8B (32/8) heads. Bytes: every sequence's K and V rows. The step runs without a
  // graph, so these are eager launches (the attention and, when it splits, the combine). Pools
  // smaller than 256 MB are rotated among three copies, so that the cache is read from memory as
  // a model's layers read theirs (8 x 512 rows of 32 KV heads are 67 MB, near the size of L2).
  const int paged_cases[][3] = {{32, 1, 4096}, {32, 8, 512},  {32, 8, 4096}, {32, 16, 4096},
                                {32, 32, 512}, {8, 8, 4096},  {8, 32, 4096}, {8, 64, 4096}};
  for (const auto& [kv_heads, sequences, length] : paged_cases) {
    const int block = 16, width = length / block;
    const int64_t slots = int64_t{sequences} * length, kv_dim = int64_t{kv_heads} * 128;
    const op::AttentionShape shape{32, kv_heads, 128};
    const double moved = 2.0 * slots * kv_dim * 2;  // every sequence's K and V rows
    const int copies = moved < 256e6 ? 3 : 1;
    std::vector<Tensor> ks, vs;
    for (int c = 0; c < copies; ++c) {
      ks.push_back(random_gpu(DataType::kBF16, {slots, kv_dim}, 510 + 2 * c));
      vs.push_back(random_gpu(DataType::kBF16, {slots, kv_dim}, 511 + 2 * c));
    }
    const Tensor q = random_gpu(DataType::kFP32, {sequences, 32 * 128}, 502);
    Tensor out = random_gpu(DataType::kFP32, {sequences, 32 * 128}, 503);
    std::vector<int32_t> blocks(static_cast<size_t>(sequences) * width), row_sequence(sequences);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(5));
    std::iota(row_sequence.begin(), row_sequence.end(), 0);
    const std::vector<int32_t> positions(sequences, length - 1);
    const auto upload = [](const std::vector<int32_t>& host, Shape shape) {
      Tensor t = Tensor::empty(DataType::kINT32, std::move(shape), *cuda_allocator().value()).value();
      check(copy_bytes(t.raw_data(), DeviceType::kCUDA, host.data(), DeviceType::kCPU, host.size() * 4), "upload");
      return t;
    };
    const Tensor tables = upload(blocks, {sequences, width}), rows_of = upload(row_sequence, {sequences});
    const Tensor pos = upload(positions, {sequences});
    const op::PagedKv paged{&tables, &rows_of, block};
    const auto attention = table.paged_attention[static_cast<int>(DataType::kBF16)];
    const double us = 1e3 * median_ms([&](int i) {
      check(attention(q, ks[i % copies], vs[i % copies], pos, paged, shape, out, ctx()), "paged attention");
    }, 21);
    rows.push_back({"attn paged bf16 kv" + std::to_string(kv_heads) + " " + std::to_string(sequences) +
                        " seqs len " + std::to_string(length),
                    us, moved / (us * 1e-6) / 1e9, 0});
  }

  // Prefill: GEMM (TFLOP/s in the GB/s column) and attention over a 512-row chunk.
  std::vector<std::pair<std::string, std::pair<double, double>>> prefill;
  // (LLaMA-2-7B: q/k/v, o, gate/up and down, apart and stacked.)
  for (auto [r, c] : {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}, {4096, 11008},
                      {12288, 4096}, {22016, 4096}}) {
    const int64_t tokens = 512;
    op::Weight w{random_gpu(DataType::kBF16, {r, c}, 11), {}, 0};
    const Tensor x = random_gpu(DataType::kFP32, {tokens, c}, 12);
    Tensor y = random_gpu(DataType::kFP32, {tokens, r}, 13);
    const double us = 1e3 * median_ms([&](int) {
      check(table.matmul[static_cast<int>(DataType::kBF16)](x, w, y, ctx()), "gemm");
    }, 20);
    prefill.push_back({"gemm bf16 T=512 " + std::to_string(r) + "x" + std::to_string(c),
                       {us, 2.0 * tokens * r * c / (us * 1e-6) / 1e12}});
  }
  // Prefill attention over a 512-row chunk of a bf16 cache of 4096 rows, starting at 0 and at
  // 3584 (the chunk's last rows see the whole cache), LLaMA-2-7B (32/32) and LLaMA-3-8B (32/8)
  // heads. "cuda cores" runs the kernel the tensor cores replaced: a query misaligned by 4
  // bytes sends the call there.
  for (auto [kv_heads, start] : {std::pair{32, 0}, std::pair{8, 0}, std::pair{32, 3584}}) {
    const int64_t tokens = 512, context = 4096, kv_dim = int64_t{kv_heads} * 128;
    const op::AttentionShape shape{32, kv_heads, 128};
    const Tensor k = random_gpu(DataType::kBF16, {context, kv_dim}, 14);
    const Tensor v = random_gpu(DataType::kBF16, {context, kv_dim}, 15);
    const Tensor q_storage = random_gpu(DataType::kFP32, {tokens * 32 * 128 + 1}, 16);
    const Tensor q = Tensor::view(Buffer::borrow(const_cast<void*>(q_storage.raw_data()),
                                                 q_storage.nbytes(), DeviceType::kCUDA, nullptr),
                                  0, DataType::kFP32, {tokens, 32 * 128}).value();
    const Tensor q_misaligned =
        Tensor::view(Buffer::borrow(const_cast<void*>(q_storage.raw_data()), q_storage.nbytes(),
                                    DeviceType::kCUDA, nullptr),
                     4, DataType::kFP32, {tokens, 32 * 128}).value();
    Tensor out = random_gpu(DataType::kFP32, {tokens, 32 * 128}, 17);
    std::vector<int32_t> host_pos(tokens);
    for (int i = 0; i < tokens; ++i) host_pos[i] = start + i;
    Tensor pos = Tensor::empty(DataType::kINT32, {tokens}, *cuda_allocator().value()).value();
    check(copy_bytes(pos.raw_data(), DeviceType::kCUDA, host_pos.data(), DeviceType::kCPU,
                     tokens * 4), "pos");
    const auto attention = table.attention[static_cast<int>(DataType::kBF16)];
    // Each of 32 heads does 2 * 128 multiply-adds per (query, key) pair, twice (QK, PV).
    const double pairs = tokens * (start + (tokens + 1) / 2.0);
    const double flops = 32.0 * pairs * 128 * 4;
    const std::string name = "attn prefill bf16 T=512 32/" + std::to_string(kv_heads) +
                             " from " + std::to_string(start);
    for (auto [label, query] : {std::pair{"", &q}, std::pair{" cuda cores", &q_misaligned}}) {
      const double us = 1e3 * median_ms([&](int) {
        check(attention(*query, k, v, pos, shape, out, ctx()), "prefill attention");
      }, 10);
      prefill.push_back({name + label, {us, flops / (us * 1e-6) / 1e12}});
    }
  }

  print_rows(rows, copy_gbs);
  std::printf("\n%-44s %10s %10s\n", "prefill kernel", "us", "TFLOP/s");
  for (const auto& [name, v] : prefill) {
    std::printf("%-44s %10.1f %10.1f\n", name.c_str(), v.first, v.second);
  }
  return 0;
}
