// Every CUDA kernel against the CPU kernel of the same table entry, on random inputs of awkward
// sizes; plus the CUDA allocator's pool and device copies. Skips when no GPU can be used.
//
// Tolerances (relative L2 error against the CPU result):
//  - fp32 arithmetic on identical inputs (also fp16/bf16 weights or caches, which both sides
//    widen exactly to fp32): 1e-5; attention, whose exp and long sums round differently: 2e-5.
//  - prefill matmul with half-precision weights, where the GPU also rounds the activations to
//    the weights' type for the tensor cores: fp16 2e-3 (11-bit mantissa), bf16 1e-2 (8-bit).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "kuiper/base/device.h"
#include "kuiper/base/half.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernel_table.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

// Kernels called directly run in the test program's context (CPU kernels ignore it).
const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCUDA); }

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
    gpu_allocator_ = cuda_allocator().value();
  }

  // Copies to the GPU; a failure is reported and leaves an empty tensor, which every kernel
  // then rejects, so the test fails at its next assertion.
  Tensor upload(const Tensor& t) {
    auto r = t.to(*gpu_allocator_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : Tensor();
  }
  Tensor download(const Tensor& t) {
    auto r = t.to(cpu_allocator());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : Tensor();
  }
  // An fp32 tensor full of NaN: an element the kernel fails to write fails the comparison.
  static Tensor poisoned_host(const Shape& shape) {
    Tensor host = Tensor::zeros_cpu(DataType::kFP32, shape).value();
    std::fill(host.data<float>(), host.data<float>() + host.numel(), kPoison);
    return host;
  }
  Tensor poisoned_gpu(const Shape& shape) { return upload(poisoned_host(shape)); }
  Tensor int_tensor(const std::vector<int32_t>& values) {
    Tensor t = Tensor::zeros_cpu(DataType::kINT32, {static_cast<int64_t>(values.size())}).value();
    std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
    return t;
  }

  Allocator* gpu_allocator_ = nullptr;
  const op::KernelTable& gpu_ = op::kernel_table(DeviceType::kCUDA);
  const op::KernelTable& cpu_ = op::kernel_table(DeviceType::kCPU);
  std::mt19937 rng_{20261121};
};

// `fp32` rounded to `dtype` (fp16/bf16 stored as raw bits; fp32 copied).
Tensor round_to(const Tensor& fp32, DataType dtype) {
  Tensor out = Tensor::zeros_cpu(dtype, fp32.shape()).value();
  const float* src = fp32.data<float>();
  for (int64_t i = 0; i < fp32.numel(); ++i) {
    switch (dtype) {
      case DataType::kFP32: out.data<float>()[i] = src[i]; break;
      case DataType::kFP16: out.data<uint16_t>()[i] = float_to_fp16(src[i]); break;
      case DataType::kBF16: out.data<uint16_t>()[i] = float_to_bf16(src[i]); break;
      default: ADD_FAILURE() << "round_to " << dtype_name(dtype);
    }
  }
  return out;
}

// The fp32 values a tensor of `dtype` holds (exact: widening loses nothing).
Tensor widen(const Tensor& t) {
  Tensor out = Tensor::zeros_cpu(DataType::kFP32, t.shape()).value();
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DataType::kFP32: out.data<float>()[i] = t.data<float>()[i]; break;
      case DataType::kFP16: out.data<float>()[i] = fp16_to_float(t.data<uint16_t>()[i]); break;
      case DataType::kBF16: out.data<float>()[i] = bf16_to_float(t.data<uint16_t>()[i]); break;
      default: ADD_FAILURE() << "widen " << t.describe();
    }
  }
  return out;
}

int at(DataType d) { return static_cast<int>(d); }

double error_vs(const Tensor& gpu_result_on_cpu, const Tensor& reference) {
  EXPECT_EQ(gpu_result_on_cpu.numel(), reference.numel());
  return test::relative_error(gpu_result_on_cpu.data<float>(), reference.data<float>(),
                              static_cast<size_t>(reference.numel()));
}

const DataType kFloatTypes[] = {DataType::kFP32, DataType::kFP16, DataType::kBF16};

// A cache (downloaded) after rows[t] was stored at row positions[t], starting from `initial`:
// each stored row within `rounding` of rows[t] rounded to the cache type, every other row
// byte-identical to `initial`.
void expect_stored_rows(const Tensor& cache, const Tensor& initial,
                        const std::vector<int32_t>& positions, const Tensor& rows,
                        double rounding, const std::string& what) {
  const DataType dtype = initial.dtype();
  const size_t row_bytes = initial.dim(-1) * dtype_size(dtype);
  for (int64_t r = 0; r < initial.dim(0); ++r) {
    if (std::find(positions.begin(), positions.end(), r) != positions.end()) continue;
    ASSERT_EQ(std::memcmp(static_cast<const char*>(cache.raw_data()) + r * row_bytes,
                          static_cast<const char*>(initial.raw_data()) + r * row_bytes, row_bytes), 0)
        << what << ", row " << r;
  }
  for (size_t t = 0; t < positions.size(); ++t) {
    const int64_t at = positions[t], row = static_cast<int64_t>(t);
    const Tensor stored = widen(cache.slice(at, at + 1).value());
    const Tensor want = widen(round_to(rows.slice(row, row + 1).value(), dtype));
    EXPECT_LT(error_vs(stored, want), rounding) << what << ", position " << at;
  }
}

// ---- Device services -------------------------------------------------------------------------

TEST_F(CudaKernels, PoolReusesReleasedBlocksWithoutGrowing) {
  // An odd size no other test uses, so the block found again is ours.
  constexpr size_t kBytes = 777'777;
  KUIPER_ASSERT_OK_AND_ASSIGN(void* first, gpu_allocator_->allocate(kBytes));
  const size_t peak_after_first = gpu_allocator_->peak_bytes();
  EXPECT_GE(peak_after_first, kBytes);
  gpu_allocator_->release(first, kBytes);
  KUIPER_ASSERT_OK_AND_ASSIGN(void* again, gpu_allocator_->allocate(kBytes));
  EXPECT_EQ(again, first);
  EXPECT_EQ(gpu_allocator_->peak_bytes(), peak_after_first) << "reuse must not take new memory";
  // A second live block of the same size cannot be the same one, and is new memory.
  KUIPER_ASSERT_OK_AND_ASSIGN(void* second, gpu_allocator_->allocate(kBytes));
  EXPECT_NE(second, first);
  EXPECT_GE(gpu_allocator_->peak_bytes(), peak_after_first + kBytes);
  gpu_allocator_->release(first, kBytes);
  gpu_allocator_->release(second, kBytes);
}

TEST_F(CudaKernels, PoolDoesNotHandOutFarLargerBlocks) {
  constexpr size_t kLarge = 9'000'000, kSmall = 1'000;
  KUIPER_ASSERT_OK_AND_ASSIGN(void* large, gpu_allocator_->allocate(kLarge));
  gpu_allocator_->release(large, kLarge);
  KUIPER_ASSERT_OK_AND_ASSIGN(void* small, gpu_allocator_->allocate(kSmall));
  EXPECT_NE(small, large);
  gpu_allocator_->release(small, kSmall);
}

TEST_F(CudaKernels, CopiesInEveryDirectionWithAndWithoutStream) {
  const Tensor host = test::random_tensor({1234}, rng_);
  cudaStream_t own_stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&own_stream), cudaSuccess);
  for (Stream stream : {static_cast<Stream>(nullptr), static_cast<Stream>(own_stream)}) {
    Tensor a = poisoned_gpu({1234}), b = poisoned_gpu({1234});
    Tensor back = Tensor::zeros_cpu(DataType::kFP32, {1234}).value();
    Tensor host_copy = Tensor::zeros_cpu(DataType::kFP32, {1234}).value();
    KUIPER_ASSERT_OK(a.copy_from(host, stream));       // host -> device
    KUIPER_ASSERT_OK(b.copy_from(a, stream));          // device -> device
    KUIPER_ASSERT_OK(back.copy_from(b, stream));       // device -> host
    KUIPER_ASSERT_OK(synchronize(stream));
    KUIPER_ASSERT_OK(host_copy.copy_from(back, stream));  // host -> host
    EXPECT_EQ(std::memcmp(host_copy.raw_data(), host.raw_data(), host.nbytes()), 0);
  }
  EXPECT_EQ(cudaStreamDestroy(own_stream), cudaSuccess);
}

TEST_F(CudaKernels, CopyWithoutStreamSeesWorkQueuedOnOtherStreams) {
  // Large enough that a copy not ordered after the kernel would read the poison.
  const int64_t n = int64_t{1} << 24;
  const Tensor a = test::random_tensor({n}, rng_);
  const Tensor gpu_a = upload(a);
  Tensor out = poisoned_gpu({n});
  // A context of its own: a non-blocking stream, which the default stream does not wait for.
  KUIPER_ASSERT_OK_AND_ASSIGN(auto own, op::ExecutionContext::create(DeviceType::kCUDA));
  KUIPER_ASSERT_OK(gpu_.add(gpu_a, gpu_a, out, *own));
  const Tensor result = download(out);  // no stream, no explicit wait
  KUIPER_ASSERT_OK(synchronize(own->stream()));
  for (int64_t i = 0; i < n; i += 4099) {
    ASSERT_EQ(result.data<float>()[i], a.data<float>()[i] * 2) << "element " << i;
  }
}

// ---- Kernels ---------------------------------------------------------------------------------

TEST_F(CudaKernels, EmbeddingMatchesCpuForEveryTableType) {
  const int64_t vocab = 1001, dim = 77;
  const Tensor tokens = int_tensor({0, 1000, 17, 17, 503});
  for (DataType dtype : kFloatTypes) {
    op::Weight table{round_to(test::random_tensor({vocab, dim}, rng_), dtype), {}, 0};
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {5, dim}).value();
    KUIPER_ASSERT_OK(cpu_.embedding[at(dtype)](tokens, table, expected, ctx()));
    op::Weight gpu_table{upload(table.values), {}, 0};
    Tensor out = poisoned_gpu({5, dim});
    KUIPER_ASSERT_OK(gpu_.embedding[at(dtype)](upload(tokens), gpu_table, out, ctx()));
    EXPECT_EQ(error_vs(download(out), expected), 0.0) << dtype_name(dtype);
  }
}

struct MatmulCase {
  int64_t rows, cols, tokens;
};

TEST_F(CudaKernels, MatmulMatchesCpuForEveryWeightType) {
  // Decode (tokens 1) through the GEMV: scalar path (cols not a multiple of 8), vector path
  // with a tail, a 7B-like row; prefill through cuBLAS.
  const MatmulCase cases[] = {{1, 1, 1},     {37, 1001, 1}, {300, 1000, 1}, {1000, 4096, 1},
                              {129, 1000, 7}, {77, 1001, 33}, {512, 256, 64}};
  for (DataType dtype : kFloatTypes) {
    for (const MatmulCase& c : cases) {
      op::Weight w{round_to(test::random_tensor({c.rows, c.cols}, rng_), dtype), {}, 0};
      const Tensor in = test::random_tensor({c.tokens, c.cols}, rng_);
      Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {c.tokens, c.rows}).value();
      KUIPER_ASSERT_OK(cpu_.matmul[at(dtype)](in, w, expected, ctx()));
      op::Weight gpu_w{upload(w.values), {}, 0};
      Tensor out = poisoned_gpu({c.tokens, c.rows});
      KUIPER_ASSERT_OK(gpu_.matmul[at(dtype)](upload(in), gpu_w, out, ctx()));
      double tolerance = 1e-5;
      if (c.tokens > 1 && dtype == DataType::kFP16) tolerance = 2e-3;
      if (c.tokens > 1 && dtype == DataType::kBF16) tolerance = 1e-2;
      EXPECT_LT(error_vs(download(out), expected), tolerance)
          << dtype_name(dtype) << " rows " << c.rows << " cols " << c.cols << " tokens "
          << c.tokens;
    }
  }
}

// The CUDA fp16/bf16 matmuls also take their input already in the weight's type
// (KernelTable::matmul_input): the GEMM then skips its own rounding pass, and gives the same
// bits as from the fp32 input it would have rounded. One token goes to cuBLAS too (the GEMV
// reads fp32 only).
TEST_F(CudaKernels, MatmulTakesItsInputAlreadyRounded) {
  EXPECT_EQ(gpu_.matmul_input[at(DataType::kBF16)], DataType::kBF16);
  EXPECT_EQ(gpu_.matmul_input[at(DataType::kFP16)], DataType::kFP16);
  EXPECT_EQ(gpu_.matmul_input[at(DataType::kFP32)], DataType::kFP32);
  EXPECT_EQ(cpu_.matmul_input[at(DataType::kBF16)], DataType::kFP32);
  for (DataType dtype : {DataType::kFP16, DataType::kBF16}) {
    for (const MatmulCase& c : {MatmulCase{37, 1001, 1}, MatmulCase{129, 1000, 7}, MatmulCase{512, 256, 64}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " tokens " + std::to_string(c.tokens));
      const op::Weight w{round_to(test::random_tensor({c.rows, c.cols}, rng_), dtype), {}, 0};
      const Tensor in = test::random_tensor({c.tokens, c.cols}, rng_);
      const Tensor rounded = round_to(in, dtype);
      Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {c.tokens, c.rows}).value();
      KUIPER_ASSERT_OK(cpu_.matmul[at(dtype)](widen(rounded), w, expected, ctx()));
      const op::Weight gpu_w{upload(w.values), {}, 0};
      Tensor out = poisoned_gpu({c.tokens, c.rows});
      KUIPER_ASSERT_OK(gpu_.matmul[at(dtype)](upload(rounded), gpu_w, out, ctx()));
      const Tensor got = download(out);
      EXPECT_LT(error_vs(got, expected), dtype == DataType::kBF16 ? 1e-2 : 2e-3);
      if (c.tokens > 1) {
        Tensor from_fp32 = poisoned_gpu({c.tokens, c.rows});
        KUIPER_ASSERT_OK(gpu_.matmul[at(dtype)](upload(in), gpu_w, from_fp32, ctx()));
        EXPECT_EQ(error_vs(got, download(from_fp32)), 0.0);
      }
    }
  }
  // A 16-bit input of another type than the weight's is refused.
  const op::Weight w{upload(round_to(test::random_tensor({8, 16}, rng_), DataType::kBF16)), {}, 0};
  Tensor out = poisoned_gpu({2, 8});
  EXPECT_FALSE(gpu_.matmul[at(DataType::kBF16)](upload(round_to(test::random_tensor({2, 16}, rng_), DataType::kFP16)),
                                                w, out, ctx()).ok());
}

// Norms and swiglu write a 16-bit output as their fp32 result rounded (the GEMM input they feed).
TEST_F(CudaKernels, NormsAndSwigluRoundInto16BitOutputs) {
  for (DataType dtype : {DataType::kFP16, DataType::kBF16}) {
    for (int64_t dim : {77, 4096}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " dim " + std::to_string(dim));
      // half_out holds fp32_out rounded to dtype, bit for bit.
      const auto expect_rounded_copy = [&](const Tensor& half_out, const Tensor& fp32_out) {
        EXPECT_EQ(error_vs(widen(download(half_out)), widen(round_to(download(fp32_out), dtype))), 0.0);
      };
      const Tensor in = test::random_tensor({3, dim}, rng_);
      const Tensor delta = test::random_tensor({3, dim}, rng_);
      const Tensor gpu_weight = upload(test::random_tensor({dim}, rng_, 0.5f, 1.5f));
      Tensor fp32_out = poisoned_gpu({3, dim});
      KUIPER_ASSERT_OK(gpu_.rmsnorm(upload(in), gpu_weight, 1e-5f, fp32_out, ctx()));
      Tensor half_out = upload(round_to(Tensor::zeros_cpu(DataType::kFP32, {3, dim}).value(), dtype));
      KUIPER_ASSERT_OK(gpu_.rmsnorm(upload(in), gpu_weight, 1e-5f, half_out, ctx()));
      expect_rounded_copy(half_out, fp32_out);

      Tensor x32 = upload(in), x16 = upload(in);
      KUIPER_ASSERT_OK(gpu_.add_rmsnorm(x32, upload(delta), gpu_weight, 1e-5f, fp32_out, ctx()));
      KUIPER_ASSERT_OK(gpu_.add_rmsnorm(x16, upload(delta), gpu_weight, 1e-5f, half_out, ctx()));
      expect_rounded_copy(half_out, fp32_out);
      EXPECT_EQ(error_vs(download(x16), download(x32)), 0.0);

      const Tensor gate = upload(test::random_tensor({3, dim}, rng_, -6.f, 6.f));
      KUIPER_ASSERT_OK(gpu_.swiglu(gate, upload(delta), fp32_out, ctx()));
      KUIPER_ASSERT_OK(gpu_.swiglu(gate, upload(delta), half_out, ctx()));
      expect_rounded_copy(half_out, fp32_out);
    }
  }
}

// The decode GEMV starts streaming weights while the kernel before it still runs (launch.cuh);
// its input must still be read only once that kernel is done. Queued back to back on one
// stream, a GEMV reading early would see the NaN poison instead of the norm's output.
TEST_F(CudaKernels, GemvReadsWhatTheKernelBeforeItWrote) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto own, op::ExecutionContext::create(DeviceType::kCUDA));
  const int64_t dim = 4096;
  const Tensor in = test::random_tensor({1, dim}, rng_);
  const Tensor norm_weight = test::random_tensor({dim}, rng_, 0.5f, 1.5f);
  Tensor normed = Tensor::zeros_cpu(DataType::kFP32, {1, dim}).value();
  KUIPER_ASSERT_OK(cpu_.rmsnorm(in, norm_weight, 1e-5f, normed, ctx()));
  for (DataType dtype : {DataType::kFP32, DataType::kFP16, DataType::kBF16, DataType::kINT8}) {
    const op::Weight w =
        dtype == DataType::kINT8
            ? test::random_int8_weight(dim, dim, 64, rng_)
            : op::Weight{round_to(test::random_tensor({dim, dim}, rng_), dtype), {}, 0};
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {1, dim}).value();
    KUIPER_ASSERT_OK(cpu_.matmul[at(dtype)](normed, w, expected, ctx()));
    const op::Weight gpu_w = test::to_device(w, *gpu_allocator_);
    const Tensor gpu_in = upload(in), gpu_norm_weight = upload(norm_weight);
    Tensor x = poisoned_gpu({1, dim}), out = poisoned_gpu({1, dim});
    KUIPER_ASSERT_OK(gpu_.rmsnorm(gpu_in, gpu_norm_weight, 1e-5f, x, *own));
    KUIPER_ASSERT_OK(gpu_.matmul[at(dtype)](x, gpu_w, out, *own));
    KUIPER_ASSERT_OK(synchronize(own->stream()));
    EXPECT_LT(error_vs(download(out), expected), 1e-5) << dtype_name(dtype);
  }
}

TEST_F(CudaKernels, RmsNormMatchesCpuAlsoInPlace) {
  // dim a multiple of 4 takes the 4-wide loop, others the 1-wide one.
  for (int64_t dim : {1, 77, 260, 4096, 4097}) {
    const Tensor in = test::random_tensor({3, dim}, rng_);
    const Tensor weight = test::random_tensor({dim}, rng_, 0.5f, 1.5f);
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {3, dim}).value();
    KUIPER_ASSERT_OK(cpu_.rmsnorm(in, weight, 1e-5f, expected, ctx()));
    const Tensor gpu_weight = upload(weight);
    Tensor out = poisoned_gpu({3, dim});
    KUIPER_ASSERT_OK(gpu_.rmsnorm(upload(in), gpu_weight, 1e-5f, out, ctx()));
    EXPECT_LT(error_vs(download(out), expected), 1e-5) << "dim " << dim;
    Tensor in_place = upload(in);
    KUIPER_ASSERT_OK(gpu_.rmsnorm(in_place, gpu_weight, 1e-5f, in_place, ctx()));
    EXPECT_LT(error_vs(download(in_place), expected), 1e-5) << "in place, dim " << dim;
  }
}

TEST_F(CudaKernels, AddRmsNormMatchesCpu) {
  for (int64_t dim : {1, 77, 260, 4096, 4097}) {
    Tensor x = test::random_tensor({3, dim}, rng_);
    const Tensor delta = test::random_tensor({3, dim}, rng_);
    const Tensor weight = test::random_tensor({dim}, rng_, 0.5f, 1.5f);
    Tensor gpu_x = upload(x), gpu_delta = upload(delta);
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {3, dim}).value();
    KUIPER_ASSERT_OK(cpu_.add_rmsnorm(x, delta, weight, 1e-5f, expected, ctx()));
    KUIPER_ASSERT_OK(gpu_.add_rmsnorm(gpu_x, gpu_delta, upload(weight), 1e-5f, gpu_delta, ctx()));
    EXPECT_LT(error_vs(download(gpu_x), x), 1e-6) << "sum, dim " << dim;
    EXPECT_LT(error_vs(download(gpu_delta), expected), 1e-5) << "norm written over delta, dim " << dim;
  }
}

TEST_F(CudaKernels, RopeMatchesCpuAtDevicePositions) {
  const int head_dim = 64, max_positions = 512;
  const Tensor positions = int_tensor({0, 5, 100, 3, 511, 7});
  const Tensor cos = test::random_tensor({max_positions, head_dim / 2}, rng_);
  const Tensor sin = test::random_tensor({max_positions, head_dim / 2}, rng_);
  Tensor q = test::random_tensor({6, 8 * head_dim}, rng_);
  Tensor k = test::random_tensor({6, 2 * head_dim}, rng_);
  Tensor gpu_q = upload(q), gpu_k = upload(k);
  KUIPER_ASSERT_OK(cpu_.rope(q, k, positions, cos, sin, head_dim, ctx()));
  KUIPER_ASSERT_OK(
      gpu_.rope(gpu_q, gpu_k, upload(positions), upload(cos), upload(sin), head_dim, ctx()));
  EXPECT_LT(error_vs(download(gpu_q), q), 1e-6);
  EXPECT_LT(error_vs(download(gpu_k), k), 1e-6);
}

TEST_F(CudaKernels, KvStoreWritesRoundedRowsAtPositionsOnly) {
  const int64_t context = 50, kv_dim = 96;
  const std::vector<int32_t> pos = {4, 0, 49};
  for (DataType dtype : kFloatTypes) {
    const Tensor k = test::random_tensor({3, kv_dim}, rng_);
    const Tensor v = test::random_tensor({3, kv_dim}, rng_);
    const Tensor initial = round_to(test::random_tensor({context, kv_dim}, rng_), dtype);
    Tensor k_cache = upload(initial), v_cache = upload(initial);
    KUIPER_ASSERT_OK(gpu_.kv_store[at(dtype)](upload(k), upload(v), upload(int_tensor(pos)),
                                              k_cache, v_cache, ctx()));
    // Expected: the initial cache with rows pos[t] replaced by k/v rounded to the cache type.
    const Tensor k_rounded = round_to(k, dtype), v_rounded = round_to(v, dtype);
    Tensor k_expected = round_to(widen(initial), dtype), v_expected = round_to(widen(initial), dtype);
    const size_t row_bytes = kv_dim * dtype_size(dtype);
    for (size_t t = 0; t < pos.size(); ++t) {
      std::memcpy(static_cast<char*>(k_expected.raw_data()) + pos[t] * row_bytes,
                  static_cast<const char*>(k_rounded.raw_data()) + t * row_bytes, row_bytes);
      std::memcpy(static_cast<char*>(v_expected.raw_data()) + pos[t] * row_bytes,
                  static_cast<const char*>(v_rounded.raw_data()) + t * row_bytes, row_bytes);
    }
    EXPECT_EQ(std::memcmp(download(k_cache).raw_data(), k_expected.raw_data(), k_expected.nbytes()), 0)
        << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(download(v_cache).raw_data(), v_expected.raw_data(), v_expected.nbytes()), 0)
        << dtype_name(dtype);
  }
}

// The prefill q/k/v epilogue over one stacked GEMM output against the CPU rope and the cache
// store on the split rows: q within 1e-6; cache rows within one rounding of the cache type, the
// other rows untouched.
TEST_F(CudaKernels, RopeKvStoreMatchesRopeThenCacheStore) {
  const int head_dim = 16, q_rows = 6 * head_dim, kv = 2 * head_dim, context = 50;
  const std::vector<int32_t> pos = {0, 5, 37, 49, 12};
  const int64_t tokens = static_cast<int64_t>(pos.size());
  const Tensor cos = test::random_tensor({64, head_dim / 2}, rng_);
  const Tensor sin = test::random_tensor({64, head_dim / 2}, rng_);
  const Tensor positions = int_tensor(pos);
  const Tensor qkv = test::random_tensor({tokens, q_rows + 2 * kv}, rng_);
  // CPU reference: split the rows, rotate q and k.
  Tensor q = Tensor::zeros_cpu(DataType::kFP32, {tokens, q_rows}).value();
  Tensor k = Tensor::zeros_cpu(DataType::kFP32, {tokens, kv}).value();
  Tensor v = Tensor::zeros_cpu(DataType::kFP32, {tokens, kv}).value();
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = qkv.data<float>() + t * (q_rows + 2 * kv);
    std::memcpy(q.data<float>() + t * q_rows, row, q_rows * sizeof(float));
    std::memcpy(k.data<float>() + t * kv, row + q_rows, kv * sizeof(float));
    std::memcpy(v.data<float>() + t * kv, row + q_rows + kv, kv * sizeof(float));
  }
  KUIPER_ASSERT_OK(cpu_.rope(q, k, positions, cos, sin, head_dim, ctx()));
  const Tensor gpu_qkv = upload(qkv), gpu_pos = upload(positions), gpu_cos = upload(cos),
               gpu_sin = upload(sin);
  for (DataType dtype : kFloatTypes) {
    const Tensor initial = round_to(test::random_tensor({context, kv}, rng_), dtype);
    Tensor k_cache = upload(initial), v_cache = upload(initial);
    Tensor q_out = poisoned_gpu({tokens, q_rows});
    const op::RopeKvTarget target{&gpu_pos, &gpu_cos, &gpu_sin, head_dim, q_rows, &k_cache, &v_cache};
    KUIPER_ASSERT_OK(gpu_.rope_kv_store(gpu_qkv, target, q_out, ctx()));
    EXPECT_LT(error_vs(download(q_out), q), 1e-6) << dtype_name(dtype);
    const double rounding = dtype == DataType::kFP32 ? 1e-6 : dtype == DataType::kBF16 ? 8e-3 : 1e-3;
    const std::string what(dtype_name(dtype));
    expect_stored_rows(download(k_cache), initial, pos, k, rounding, "k, " + what);
    expect_stored_rows(download(v_cache), initial, pos, v, rounding, "v, " + what);
  }
}

// x quantized in halves of 16 (kernel_table.h, decode_quantized_x_bytes), read back from its
// bytes: for block b of 32, even values in 16 bytes at b, odd ones in 16 bytes after all blocks'
// even ones (value k at byte k / 8 * 4 + k % 8 / 2), then each half's scale and Σ q.
struct DecodedHalves {
  std::vector<int> q;
  std::vector<float> scale;
  std::vector<int> q_sum;
};
DecodedHalves decode_halves(const Tensor& quantized, int64_t n) {
  const auto* bytes = quantized.data<int8_t>();
  DecodedHalves d{std::vector<int>(n), std::vector<float>(n / 16), std::vector<int>(n / 16)};
  const int64_t blocks = n / 32;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / 32, k = i % 32;
    const int64_t base = (k % 2 == 0 ? 0 : blocks * 16) + b * 16;
    d.q[i] = bytes[base + k / 8 * 4 + k % 8 / 2];
  }
  for (int64_t h = 0; h < n / 16; ++h) {
    std::memcpy(&d.scale[h], bytes + blocks * 32 + h * 8, 4);
    std::memcpy(&d.q_sum[h], bytes + blocks * 32 + h * 8 + 4, 4);
  }
  return d;
}

// `values` (fp32, on the host) against their quantized form (int8, on the host): each half's
// scale max|x| / 127 and Σ q, and every value within half a step of its half's scale.
void expect_quantized_halves(const Tensor& values, const Tensor& quantized, const std::string& what) {
  const int64_t n = values.numel();
  ASSERT_EQ(quantized.numel(), op::decode_quantized_x_bytes(n)) << what;
  const DecodedHalves d = decode_halves(quantized, n);
  const float* v = values.data<float>();
  for (int64_t h = 0; h < n / 16; ++h) {
    float max_abs = 0;
    int sum = 0;
    for (int64_t i = h * 16; i < h * 16 + 16; ++i) {
      max_abs = std::max(max_abs, std::fabs(v[i]));
      sum += d.q[i];
    }
    ASSERT_NEAR(d.scale[h], max_abs / 127, 1e-6 * max_abs) << what << ", half " << h;
    ASSERT_EQ(d.q_sum[h], sum) << what << ", half " << h;
    for (int64_t i = h * 16; i < h * 16 + 16; ++i) {
      ASSERT_NEAR(d.scale[h] * d.q[i], v[i], 0.5001 * d.scale[h] + 1e-30) << what << ", value " << i;
    }
  }
}

struct AttentionCase {
  int n_kv_heads, group, head_dim;
};

// Runs the CUDA attention over a cache of `dtype` and the CPU attention over the same values
// widened to fp32; rows from `length` on hold huge values, so reading them would show.
class CudaAttention : public CudaKernels {
 protected:
  // Runs `attend` (a CUDA attention kernel writing its argument) into an fp32 output, which it
  // returns downloaded, and into fp16 and bf16 outputs, the dtypes a matmul after attention
  // reads (kernel_table.h, AttentionKernel): those must hold the fp32 output rounded, bit for
  // bit. Every output starts as NaN, so an element left unwritten fails.
  template <typename Attend>
  Tensor attend_into_every_output(const Shape& shape, const Attend& attend) {
    Tensor out = poisoned_gpu(shape);
    EXPECT_TRUE(attend(out).ok());
    const Tensor fp32 = download(out);
    const Tensor poison = poisoned_host(shape);
    for (DataType type : {DataType::kFP16, DataType::kBF16}) {
      Tensor rounded = upload(round_to(poison, type));
      const Status status = attend(rounded);
      EXPECT_TRUE(status.ok()) << dtype_name(type) << " output: " << status.to_string();
      const Tensor got = download(rounded), want = round_to(fp32, type);
      int64_t differ = 0;
      for (int64_t i = 0; i < want.numel(); ++i) differ += got.data<uint16_t>()[i] != want.data<uint16_t>()[i];
      EXPECT_EQ(differ, 0) << "of " << want.numel() << " elements of the " << dtype_name(type) << " output";
    }
    return fp32;
  }

  void check(DataType dtype, const AttentionCase& c, int64_t capacity,
             const std::vector<int32_t>& positions, double tolerance) {
    const op::AttentionShape shape{c.n_kv_heads * c.group, c.n_kv_heads, c.head_dim};
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
    const int64_t q_dim = int64_t{shape.n_heads} * c.head_dim;
    int32_t longest = 0;
    for (int32_t p : positions) longest = std::max(longest, p);
    Tensor k = test::random_tensor({capacity, kv_dim}, rng_);
    Tensor v = test::random_tensor({capacity, kv_dim}, rng_);
    for (int64_t i = (longest + 1) * kv_dim; i < capacity * kv_dim; ++i) {
      k.data<float>()[i] = 1e4f;
      v.data<float>()[i] = 1e4f;
    }
    const Tensor k_cache = round_to(k, dtype), v_cache = round_to(v, dtype);
    const Tensor q = test::random_tensor({tokens, q_dim}, rng_, -2.f, 2.f);
    const Tensor pos = int_tensor(positions);
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {tokens, q_dim}).value();
    KUIPER_ASSERT_OK(cpu_.attention[at(DataType::kFP32)](q, widen(k_cache), widen(v_cache), pos,
                                                         shape, expected, ctx()));
    const Tensor gpu_q = upload(q), gpu_k = upload(k_cache), gpu_v = upload(v_cache), gpu_pos = upload(pos);
    const Tensor out = attend_into_every_output({tokens, q_dim}, [&](Tensor& o) {
      return gpu_.attention[at(dtype)](gpu_q, gpu_k, gpu_v, gpu_pos, shape, o, ctx());
    });
    EXPECT_LT(error_vs(out, expected), tolerance)
        << dtype_name(dtype) << " kv heads " << c.n_kv_heads << " group " << c.group
        << " head_dim " << c.head_dim << " capacity " << capacity << " rows " << tokens
        << " last position " << positions.back();
  }

  void check_paged(const std::vector<int32_t>& table_values, int sequences, const std::vector<int32_t>& row_sequence,
                   const std::vector<int32_t>& positions, bool split, bool grouped, int block = 16);
};

TEST_F(CudaAttention, DecodeMatchesCpuAcrossGroupsAndLengths) {
  // 16-bit caches with head_dim 64 or 128 take the streaming kernel
  // (attention_decode_kernel.cuh), fp32 caches the tiled one.
  const AttentionCase cases[] = {{3, 1, 128}, {5, 1, 64}, {2, 4, 64}, {2, 8, 128}};
  for (DataType dtype : kFloatTypes) {
    for (const AttentionCase& c : cases) {
      for (int32_t length : {1, 37, 1000, 4100}) {
        // Capacity past the length, at least three ranges with a partial last one, so decode runs
        // split blocks that must exit early.
        const int64_t capacity = std::max<int64_t>(length + 13, 2 * op::kDecodeSplitMinRows + 44);
        check(dtype, c, capacity, {length - 1}, 2e-5);
      }
      // A cache of one range, as a short row's decode step hands attention
      // (op::decode_attention_reach): one block of more warps a head.
      for (int32_t length : {1, 37, op::kDecodeSplitMinRows}) {
        check(dtype, c, op::kDecodeSplitMinRows, {length - 1}, 2e-5);
      }
    }
  }
}

// Decode attention that also writes its output quantized for an int8 or int4 wo (kernel_table.h,
// AttentionQuantizedOutputKernel): the fp32 output against the CPU as above, and its quantized
// form against that output. Capacities of one split's rows (the attention kernel quantizes) and
// of several (the combine does), with a length of one split and of several. bf16 caches take the
// streaming kernel, fp32 ones the tiled one.
TEST_F(CudaAttention, DecodeWritesItsOutputQuantizedForTheGemvAfterIt) {
  for (const AttentionCase& c : {AttentionCase{2, 4, 64}, AttentionCase{4, 1, 128}}) {
    const op::AttentionShape shape{c.n_kv_heads * c.group, c.n_kv_heads, c.head_dim};
    const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim, q_dim = int64_t{shape.n_heads} * c.head_dim;
    for (auto [dtype, capacity, length] : {std::tuple<DataType, int64_t, int32_t>{DataType::kBF16, 48, 20},
                                           {DataType::kBF16, 64, 64},
                                           {DataType::kBF16, 700, 20},
                                           {DataType::kBF16, 700, 650},
                                           {DataType::kFP32, 48, 20},
                                           {DataType::kFP32, 700, 650}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " head_dim " + std::to_string(c.head_dim) + ", capacity " +
                   std::to_string(capacity) + ", length " + std::to_string(length));
      const Tensor k_cache = round_to(test::random_tensor({capacity, kv_dim}, rng_), dtype);
      const Tensor v_cache = round_to(test::random_tensor({capacity, kv_dim}, rng_), dtype);
      const Tensor q = test::random_tensor({1, q_dim}, rng_, -2.f, 2.f);
      const Tensor pos = int_tensor({length - 1});
      Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {1, q_dim}).value();
      KUIPER_ASSERT_OK(cpu_.attention[at(DataType::kFP32)](q, widen(k_cache), widen(v_cache), pos, shape, expected,
                                                           ctx()));
      const Tensor gpu_q = upload(q), gpu_k = upload(k_cache), gpu_v = upload(v_cache), gpu_pos = upload(pos);
      Tensor out = poisoned_gpu({1, q_dim});
      Tensor quantized = upload(Tensor::zeros_cpu(DataType::kINT8, {op::decode_quantized_x_bytes(q_dim)}).value());
      KUIPER_ASSERT_OK(
          gpu_.attention_quantized_output[at(dtype)](gpu_q, gpu_k, gpu_v, gpu_pos, shape, out, quantized, ctx()));
      const Tensor got = download(out);
      EXPECT_LT(error_vs(got, expected), 2e-5);
      expect_quantized_halves(got, download(quantized), "attention output");
    }
    // Only one row, and heads of whole blocks of 32, are written quantized.
    Tensor quantized = upload(Tensor::zeros_cpu(DataType::kINT8, {op::decode_quantized_x_bytes(2 * q_dim)}).value());
    Tensor two_rows = poisoned_gpu({2, q_dim});
    const Tensor cache = upload(round_to(test::random_tensor({64, kv_dim}, rng_), DataType::kBF16));
    EXPECT_EQ(gpu_.attention_quantized_output[at(DataType::kBF16)](upload(test::random_tensor({2, q_dim}, rng_)), cache,
                                                                   cache, upload(int_tensor({3, 4})), shape, two_rows,
                                                                   quantized, ctx())
                  .code(),
              StatusCode::kUnsupported);
  }
}

// Paged attention: rows of several sequences over a pool of shuffled blocks of `block` positions
// (table: sequences x blocks, row by row), CUDA against the CPU kernel over the same cache values
// widened to fp32. head_dim 64 and 128 take the streaming kernel for 16-bit caches, 50 (and fp32
// caches) the one-position kernel. `split`: whether, on this GPU, every case splits each row's
// positions into ranges merged by the combine kernel, or runs one. `grouped`: that every
// streaming case of groups above one attends for several query heads of a KV head in a block
// (groups of 4, of 7 in blocks of 4 and 3, of 3 in blocks of 2 and 1; the layout is
// op::paged_attention_layout's), where otherwise each case takes the layout its size gives.
void CudaAttention::check_paged(const std::vector<int32_t>& table_values, int sequences,
                                const std::vector<int32_t>& row_sequence, const std::vector<int32_t>& positions,
                                bool split, bool grouped, int block) {
  const int64_t width = static_cast<int64_t>(table_values.size()) / sequences;
  KUIPER_ASSERT_OK_AND_ASSIGN(const int multiprocessors, cuda_multiprocessors());
  for (DataType dtype : kFloatTypes) {
    for (const AttentionCase& c : {AttentionCase{2, 4, 64}, AttentionCase{4, 1, 128}, AttentionCase{1, 2, 50},
                                   AttentionCase{2, 7, 128}, AttentionCase{1, 3, 64}}) {
      const op::AttentionShape shape{c.n_kv_heads * c.group, c.n_kv_heads, c.head_dim};
      const bool streams = dtype != DataType::kFP32 && (c.head_dim == 64 || c.head_dim == 128);
      const op::PagedLayout layout = op::paged_attention_layout(static_cast<int64_t>(positions.size()),
                                                                width * block, shape, multiprocessors, streams);
      const op::AttentionSplits& ranges = layout.ranges;
      EXPECT_EQ(ranges.splits > 1, split) << "head_dim " << c.head_dim << ": " << ranges.splits << " ranges of "
                                          << ranges.span << " on " << multiprocessors << " multiprocessors";
      if (grouped && streams && c.group > 1) {
        EXPECT_GT(layout.heads_per_block, 1) << dtype_name(dtype) << " group " << c.group;
      }
      const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim, q_dim = int64_t{shape.n_heads} * c.head_dim;
      const int64_t slots = (int64_t{*std::max_element(table_values.begin(), table_values.end())} + 1) * block;
      const int64_t rows = static_cast<int64_t>(positions.size());
      Tensor k = test::random_tensor({slots, kv_dim}, rng_), v = test::random_tensor({slots, kv_dim}, rng_);
      const Tensor k_cache = round_to(k, dtype), v_cache = round_to(v, dtype);
      const Tensor q = test::random_tensor({rows, q_dim}, rng_, -2.f, 2.f);
      Tensor tables = int_tensor(table_values).reshape({sequences, width}).value();
      const Tensor row_seq = int_tensor(row_sequence), pos = int_tensor(positions);
      Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {rows, q_dim}).value();
      const op::PagedKv host_paged{&tables, &row_seq, block};
      KUIPER_ASSERT_OK(cpu_.paged_attention[at(DataType::kFP32)](q, widen(k_cache), widen(v_cache), pos, host_paged,
                                                                  shape, expected, ctx()));
      const Tensor gpu_tables = upload(tables), gpu_row_seq = upload(row_seq);
      const op::PagedKv gpu_paged{&gpu_tables, &gpu_row_seq, block};
      const Tensor gpu_q = upload(q), gpu_k = upload(k_cache), gpu_v = upload(v_cache), gpu_pos = upload(pos);
      const Tensor out = attend_into_every_output({rows, q_dim}, [&](Tensor& o) {
        return gpu_.paged_attention[at(dtype)](gpu_q, gpu_k, gpu_v, gpu_pos, gpu_paged, shape, o, ctx());
      });
      EXPECT_LT(error_vs(out, expected), 2e-5)
          << dtype_name(dtype) << " head_dim " << c.head_dim << ", " << ranges.splits << " ranges of " << ranges.span
          << ", " << layout.heads_per_block << " heads a block";
    }
  }
}

// Four blocks of 16 per sequence: one range of 64 positions, whatever the GPU.
TEST_F(CudaAttention, PagedMatchesCpuForSeveralSequences) {
  check_paged({7, 2, 9, 4, 0, 3, 1, 8, 5, 6, 11, 10}, 3, {0, 1, 2, 0, 2, 1}, {0, 17, 63, 40, 5, 33}, false, false);
}

// Contexts of hundreds and thousands of positions over few rows, so that each row's positions
// are split into ranges merged by the combine kernel (on an H100, 4 and 16 ranges of 256): rows
// of different lengths in one step (ranges past a row's length stay empty), rows shorter than one
// range (0, 5, 16, 33), chunks that end mid-block and past a row's last position, and with blocks
// of 24 positions, chunks and ranges that straddle blocks.
TEST_F(CudaAttention, PagedMatchesCpuOverLongContexts) {
  const auto shuffled_blocks = [&](int count) {
    std::vector<int32_t> blocks(count);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng_);
    return blocks;
  };
  check_paged(shuffled_blocks(3 * 50), 3, {0, 1, 2, 1, 2, 0, 2}, {799, 0, 16, 415, 640, 33, 798}, true, false);
  check_paged(shuffled_blocks(2 * 170), 2, {0, 1, 0, 1}, {4079, 5, 2000, 4030}, true, false, 24);
}

// Enough rows over long enough tables that grouped-query cases attend for several query heads in
// a block (op::paged_attention_layout; on an H100 or H200, 4 to 16 ranges a row): 40 sequences of
// up to 4,000 positions, each over its own shuffle of one pool of 256 blocks of 16, at lengths
// that end mid-chunk and mid-block.
TEST_F(CudaAttention, PagedGroupsQueryHeadsForManyRows) {
  constexpr int kSequences = 40, kWidth = 256;
  std::vector<int32_t> tables;
  std::vector<int32_t> rows(kSequences), positions(kSequences);
  for (int sequence = 0; sequence < kSequences; ++sequence) {
    std::vector<int32_t> blocks(kWidth);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng_);
    tables.insert(tables.end(), blocks.begin(), blocks.end());
    rows[sequence] = sequence;
    positions[sequence] = 4000 - 97 * sequence;
  }
  check_paged(tables, kSequences, rows, positions, true, true);
}

TEST_F(CudaAttention, DecodeHandlesOddHeadDimAndGroupsBeyondOneBlock) {
  // Two blocks per KV head; 100-byte rows, which cannot be copied 16 bytes at a time.
  check(DataType::kBF16, {2, 16, 50}, 700, {650}, 2e-5);
  check(DataType::kFP16, {1, 2, 50}, 3000, {2999}, 2e-5);
  check(DataType::kFP32, {1, 3, 256}, 600, {599}, 2e-5);  // 16-row tiles, 16 a range, 3 ranges
}

// Prefill over fp16/bf16 caches with head_dim 64 or 128 runs on the tensor cores, which round
// the queries and the softmax weights to the cache's type: tolerances as for the prefill
// matmul. fp32 caches take the CUDA-core kernel.
double prefill_tolerance(DataType cache) {
  return cache == DataType::kBF16 ? 1e-2 : cache == DataType::kFP16 ? 2e-3 : 2e-5;
}

TEST_F(CudaAttention, PrefillMatchesCpuForACausalChunk) {
  for (DataType dtype : kFloatTypes) {
    for (const AttentionCase& c : {AttentionCase{2, 4, 64}, AttentionCase{4, 1, 128}}) {
      for (int32_t start : {0, 500}) {
        std::vector<int32_t> positions(37);
        for (int i = 0; i < 37; ++i) positions[i] = start + i;
        check(dtype, c, 1000, positions, prefill_tolerance(dtype));
      }
    }
  }
  // Any positions, any order.
  check(DataType::kFP16, {2, 8, 64}, 200, {5, 0, 99}, prefill_tolerance(DataType::kFP16));
}

TEST_F(CudaAttention, PrefillSpansSeveralQueryAndKeyTiles) {
  // 200 rows: three full 64-row query tiles and a partial one; starting at 70, so the tiles of
  // 64 cache rows never line up with the chunk; the last row sees the whole cache.
  std::vector<int32_t> positions(200);
  for (int i = 0; i < 200; ++i) positions[i] = 70 + i;
  for (DataType dtype : {DataType::kBF16, DataType::kFP16}) {
    check(dtype, {2, 4, 128}, 270, positions, prefill_tolerance(dtype));
    check(dtype, {3, 2, 64}, 300, positions, prefill_tolerance(dtype));
  }
  // Shapes the tensor cores do not take fall back: head_dim 50 on a bf16 cache.
  check(DataType::kBF16, {2, 4, 50}, 300, positions, 2e-5);
}

TEST_F(CudaAttention, PrefillGivesZerosForPositionsOutsideTheCache) {
  // The CPU kernel refuses such positions, so the GPU result is checked directly: row 0 is a
  // normal row, rows 1 and 2 (past the cache, negative) must be zeros, not NaN or garbage.
  const int64_t capacity = 100, kv_dim = 128, q_dim = 2 * 128;
  const op::AttentionShape shape{2, 1, 128};
  const Tensor cache = round_to(test::random_tensor({capacity, kv_dim}, rng_), DataType::kBF16);
  const Tensor q = test::random_tensor({3, q_dim}, rng_);
  const Tensor gpu_q = upload(q), gpu_cache = upload(cache), gpu_pos = upload(int_tensor({99, 100, -1}));
  const Tensor back = attend_into_every_output({3, q_dim}, [&](Tensor& o) {
    return gpu_.attention[at(DataType::kBF16)](gpu_q, gpu_cache, gpu_cache, gpu_pos, shape, o, ctx());
  });
  for (int64_t i = 0; i < q_dim; ++i) EXPECT_TRUE(std::isfinite(back.data<float>()[i])) << i;
  for (int64_t i = q_dim; i < 3 * q_dim; ++i) ASSERT_EQ(back.data<float>()[i], 0.f) << i;
}

TEST_F(CudaAttention, DecodeGivesZerosForAPositionOutsideTheCache) {
  // As prefill above, for one row over a cache of one range or of several, none of which then
  // holds a position: zeros, with nothing to merge. Then a row of five ranges in the same
  // context, which its last block merges.
  const int64_t kv_dim = 128, q_dim = 2 * 128;
  const op::AttentionShape shape{2, 1, 128};
  const Tensor gpu_q = upload(test::random_tensor({1, q_dim}, rng_));
  for (int64_t capacity : {int64_t{op::kDecodeSplitMinRows}, int64_t{5} * op::kDecodeSplitMinRows}) {
    const Tensor gpu_cache = upload(round_to(test::random_tensor({capacity, kv_dim}, rng_), DataType::kBF16));
    for (int32_t position : {static_cast<int32_t>(capacity), -1}) {
      const Tensor gpu_pos = upload(int_tensor({position}));
      const Tensor back = attend_into_every_output({1, q_dim}, [&](Tensor& o) {
        return gpu_.attention[at(DataType::kBF16)](gpu_q, gpu_cache, gpu_cache, gpu_pos, shape, o, ctx());
      });
      for (int64_t i = 0; i < q_dim; ++i) {
        ASSERT_EQ(back.data<float>()[i], 0.f) << "capacity " << capacity << ", position " << position << ", " << i;
      }
    }
  }
  const int64_t capacity = 5 * op::kDecodeSplitMinRows;
  check(DataType::kBF16, {1, 2, 128}, capacity, {static_cast<int32_t>(capacity) - 1}, 2e-5);
}

TEST_F(CudaKernels, SwigluAndAddMatchCpuAlsoInPlace) {
  // n is not a multiple of 4: the kernels' 4-wide loop leaves a tail. Offset 1 makes every
  // operand a view that is not 16-byte aligned, which takes the 1-wide loop.
  const int64_t n = 11008 + 3;
  const Tensor a = test::random_tensor({n}, rng_, -6.f, 6.f);
  const Tensor b = test::random_tensor({n}, rng_);
  Tensor expected_swiglu = Tensor::zeros_cpu(DataType::kFP32, {n}).value();
  Tensor expected_sum = Tensor::zeros_cpu(DataType::kFP32, {n}).value();
  KUIPER_ASSERT_OK(cpu_.swiglu(a, b, expected_swiglu, ctx()));
  KUIPER_ASSERT_OK(cpu_.add(a, b, expected_sum, ctx()));
  // `t` uploaded at element `offset` of a longer device buffer, as a view of n elements.
  const auto upload_at = [&](const Tensor& t, int64_t offset) {
    Tensor padded = Tensor::zeros_cpu(DataType::kFP32, {n + offset}).value();
    std::memcpy(padded.data<float>() + offset, t.data<float>(), n * sizeof(float));
    return upload(padded).slice(offset, offset + n).value();
  };
  for (int64_t offset : {0, 1}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    const Tensor gpu_a = upload_at(a, offset), gpu_b = upload_at(b, offset);
    Tensor out = upload_at(Tensor::zeros_cpu(DataType::kFP32, {n}).value(), offset);
    KUIPER_ASSERT_OK(gpu_.swiglu(gpu_a, gpu_b, out, ctx()));
    EXPECT_LT(error_vs(download(out), expected_swiglu), 1e-6);
    Tensor gate = upload_at(a, offset);
    KUIPER_ASSERT_OK(gpu_.swiglu(gate, gpu_b, gate, ctx()));
    EXPECT_LT(error_vs(download(gate), expected_swiglu), 1e-6);

    Tensor sum = upload_at(a, offset);
    KUIPER_ASSERT_OK(gpu_.add(sum, gpu_b, sum, ctx()));
    EXPECT_EQ(error_vs(download(sum), expected_sum), 0.0);
  }
}

// The batched steps' swiglu over the stacked gate|up GEMM's rows: the unstacked swiglu of the
// CPU on each row's halves. n = 43 and the unaligned view take the 1-wide loop, 4096 the 4-wide
// one; a 16-bit output is the fp32 one rounded.
TEST_F(CudaKernels, SwigluStackedIsSwigluOfEachRowsHalves) {
  for (const int64_t n : {int64_t{43}, int64_t{4096}}) {
    for (const int64_t rows : {1, 5}) {
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE("n " + std::to_string(n) + ", rows " + std::to_string(rows) + ", offset " + std::to_string(offset));
        const Tensor gate_up = test::random_tensor({rows, 2 * n}, rng_, -6.f, 6.f);
        Tensor gate = Tensor::zeros_cpu(DataType::kFP32, {rows, n}).value();
        Tensor up = Tensor::zeros_cpu(DataType::kFP32, {rows, n}).value();
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(gate.data<float>() + r * n, gate_up.data<float>() + r * 2 * n, n * sizeof(float));
          std::memcpy(up.data<float>() + r * n, gate_up.data<float>() + r * 2 * n + n, n * sizeof(float));
        }
        Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {rows, n}).value();
        KUIPER_ASSERT_OK(cpu_.swiglu(gate, up, expected, ctx()));
        Tensor padded = Tensor::zeros_cpu(DataType::kFP32, {rows * 2 * n + offset}).value();
        std::memcpy(padded.data<float>() + offset, gate_up.data<float>(), rows * 2 * n * sizeof(float));
        const Tensor gpu_in =
            upload(padded).slice(offset, offset + rows * 2 * n).value().reshape({rows, 2 * n}).value();
        Tensor out = poisoned_gpu({rows, n});
        KUIPER_ASSERT_OK(gpu_.swiglu_stacked(gpu_in, out, ctx()));
        EXPECT_LT(error_vs(download(out), expected), 1e-6);
        Tensor half_out = upload(round_to(Tensor::zeros_cpu(DataType::kFP32, {rows, n}).value(), DataType::kBF16));
        KUIPER_ASSERT_OK(gpu_.swiglu_stacked(gpu_in, half_out, ctx()));
        EXPECT_EQ(error_vs(widen(download(half_out)), widen(round_to(download(out), DataType::kBF16))), 0.0);
      }
    }
  }
  Tensor narrow = poisoned_gpu({5, 42});
  EXPECT_FALSE(gpu_.swiglu_stacked(upload(test::random_tensor({5, 86}, rng_)), narrow, ctx()).ok());
}

TEST_F(CudaKernels, ArgmaxFindsTheFirstLargest) {
  for (int64_t n : {1, 1000, 32001, 128256}) {
    Tensor logits = test::random_tensor({n}, rng_, -10.f, 10.f);
    if (n > 1000) {  // a tie for the maximum: the smaller index wins
      logits.data<float>()[n - 7] = 50.f;
      logits.data<float>()[n / 3] = 50.f;
    }
    Tensor expected = Tensor::zeros_cpu(DataType::kINT32, {1}).value();
    KUIPER_ASSERT_OK(cpu_.argmax(logits, expected, ctx()));
    Tensor out = upload(int_tensor({-1}));
    KUIPER_ASSERT_OK(gpu_.argmax(upload(logits), out, ctx()));
    EXPECT_EQ(download(out).data<int32_t>()[0], expected.data<int32_t>()[0]) << "n " << n;
  }
}

TEST_F(CudaKernels, ArgmaxOfRowsMatchesTheCpuRowByRow) {
  for (int64_t n : {7, 32000, 128256}) {
    const int64_t rows = 5;
    Tensor logits = test::random_tensor({rows, n}, rng_, -10.f, 10.f);
    logits.data<float>()[1 * n + n - 1] = 50.f;  // a tie in row 1: the smaller index wins
    logits.data<float>()[1 * n + n / 2] = 50.f;
    logits.data<float>()[3 * n + n / 3] = std::nanf("");
    Tensor expected = Tensor::zeros_cpu(DataType::kINT32, {rows}).value();
    KUIPER_ASSERT_OK(cpu_.argmax(logits, expected, ctx()));
    Tensor out = upload(int_tensor({-2, -2, -2, -2, -2}));
    KUIPER_ASSERT_OK(gpu_.argmax(upload(logits), out, ctx()));
    const Tensor got = download(out);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(got.data<int32_t>()[r], expected.data<int32_t>()[r]) << "n " << n << " row " << r;
    }
    EXPECT_EQ(got.data<int32_t>()[3], -1);
  }
}

// The fused decode GEMV (kernel_table.h, DecodeGemv) against the CPU kernels run one after
// another: rmsnorm, matmul, then the epilogue's own kernel (add, swiglu, rope + kv_store).
// Row lengths take every way of reading rows: one pass per block (4096 and 1000 floats),
// 16-byte chunks walked by warps (8200 floats, too long for one pass; 4096 and 240 int8), and
// the scalar fallback (101 floats; int8 with groups of 4). Tolerance 1e-5 as for the GEMV (the
// GPU applies 1 / rms to the dot product rather than to each input: fp32 rounding); cache rows
// are compared after both sides round to the cache type, to within one rounding step.
class CudaDecodeGemv : public CudaKernels {
 protected:
  struct Case {
    DataType dtype;
    int64_t cols;
    int group;  // int8 only
  };
  // The three forms of input norm (kernel_table.h, DecodeGemv): none; x · g with the sums of
  // squares a kAccumulate GEMV hands on; x itself with g, whose squares the GEMV sums (or, where
  // its kernel cannot, normalizes into scratch first).
  enum class Norm { kNone, kGivenSums, kFromX };
  static constexpr Norm kNorms[] = {Norm::kNone, Norm::kGivenSums, Norm::kFromX};
  static std::string name(Norm norm) {
    return norm == Norm::kNone ? "no norm" : norm == Norm::kGivenSums ? "norm from sums" : "norm from x";
  }
  // What a GEMV with `norm` reads, on the GPU; x · g and the sums of squares of x over runs are
  // made on the host.
  struct GemvInput {
    Tensor in, sumsq, g;
    void into(op::DecodeGemv& gemv) const {
      gemv.in = &in;
      gemv.in_sumsq = sumsq.is_empty() ? nullptr : &sumsq;
      gemv.in_norm_weight = g.is_empty() ? nullptr : &g;
      gemv.norm_eps = 1e-5f;
    }
  };
  GemvInput gemv_input(const Tensor& x, const Tensor& g, Norm norm) {
    if (norm == Norm::kNone) return {upload(x), Tensor(), Tensor()};
    if (norm == Norm::kFromX) return {upload(x), Tensor(), upload(g)};
    const int64_t n = x.numel();
    Tensor scaled = Tensor::zeros_cpu(DataType::kFP32, x.shape()).value();
    Tensor sumsq = Tensor::zeros_cpu(DataType::kFP32, {op::decode_sumsq_runs(n)}).value();
    for (int64_t i = 0; i < n; ++i) {
      const float v = x.data<float>()[i];
      scaled.data<float>()[i] = v * g.data<float>()[i];
      sumsq.data<float>()[i / op::kDecodeSumsqRun] += v * v;
    }
    return {upload(scaled), upload(sumsq), Tensor()};
  }
  // A random weight of the case's type on the CPU and its copy on the GPU.
  std::pair<op::Weight, op::Weight> weight(const Case& c, int64_t rows, int64_t cols) {
    op::Weight w = c.dtype == DataType::kINT8
                       ? test::random_int8_weight(rows, cols, c.group, rng_)
                       : op::Weight{round_to(test::random_tensor({rows, cols}, rng_), c.dtype), {}, 0};
    op::Weight gpu = test::to_device(w, *gpu_allocator_);
    return {std::move(w), std::move(gpu)};
  }
  // CPU reference of W · (g ? rmsnorm(x) * g : x).
  Tensor reference(const op::Weight& w, const Tensor& x, const Tensor* g) {
    Tensor input = x;
    if (g != nullptr) {
      input = Tensor::zeros_cpu(DataType::kFP32, {1, x.numel()}).value();
      EXPECT_TRUE(cpu_.rmsnorm(x, *g, 1e-5f, input, ctx()).ok());
    }
    Tensor y = Tensor::zeros_cpu(DataType::kFP32, {1, w.rows()}).value();
    EXPECT_TRUE(cpu_.matmul[at(w.dtype())](input, w, y, ctx()).ok());
    return y;
  }
  static std::vector<Case> cases() {
    std::vector<Case> all;
    for (DataType d : kFloatTypes) {
      for (int64_t cols : {4096, 1000, 8200, 101}) all.push_back({d, cols, 0});
    }
    for (auto [cols, group] : {std::pair{4096, 64}, {240, 16}, {100, 4}}) {
      all.push_back({DataType::kINT8, cols, group});
    }
    return all;
  }
  static std::string describe(const Case& c) {
    return std::string(dtype_name(c.dtype)) + " cols " + std::to_string(c.cols);
  }
};

// A residual accumulate that hands a norm on, then a norm-fed store reading what it left
// (37 rows: not a whole number of blocks or of runs, and a scalar next GEMV; 256: chunks).
TEST_F(CudaDecodeGemv, AccumulateHandsTheNormToTheNextGemv) {
  for (const Case& c : cases()) {
    for (int64_t rows : {37, 256}) {
      auto [w, gpu_w] = weight(c, rows, c.cols);
      const Tensor x = test::random_tensor({1, c.cols}, rng_);
      const Tensor residual = test::random_tensor({rows}, rng_);
      const Tensor g = test::random_tensor({rows}, rng_, 0.5f, 1.5f);
      Tensor expected = reference(w, x, nullptr);
      for (int64_t i = 0; i < rows; ++i) expected.data<float>()[i] += residual.data<float>()[i];

      const Tensor gpu_x = upload(x), gpu_g = upload(g);
      Tensor sum = upload(residual), normed = poisoned_gpu({rows});
      Tensor sumsq = poisoned_gpu({op::decode_sumsq_runs(rows)});
      op::DecodeGemv gemv{.in = &gpu_x, .weight = &gpu_w, .epilogue = op::GemvEpilogue::kAccumulate,
                          .out = &sum, .next_norm_weight = &gpu_g, .next_normed = &normed,
                          .next_sumsq = &sumsq, .rope_kv = {}};
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      const std::string what = describe(c) + ", " + std::to_string(rows) + " rows";
      EXPECT_LT(error_vs(download(sum), expected), 1e-5) << "accumulate, " << what;

      // What the norm-fed GEMV after it computes: W2 · rmsnorm(sum) * g.
      const Case next{c.dtype, rows, rows % 64 == 0 ? 64 : 1};
      auto [w2, gpu_w2] = weight(next, 29, rows);
      Tensor out = poisoned_gpu({29});
      gemv = {.in = &normed, .weight = &gpu_w2, .in_sumsq = &sumsq, .norm_eps = 1e-5f, .out = &out,
              .rope_kv = {}};
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      EXPECT_LT(error_vs(download(out), reference(w2, download(sum), &g)), 1e-5)
          << "norm-fed store, " << what;
    }
  }
}

// Without a norm prologue, as a GEMV runs whose input was normalized into scratch first.
TEST_F(CudaDecodeGemv, Swiglu) {
  for (const Case& c : cases()) {
    const int64_t hidden = 45;
    auto [w, gpu_w] = weight(c, 2 * hidden, c.cols);
    const Tensor x = test::random_tensor({1, c.cols}, rng_);
    const Tensor y = reference(w, x, nullptr);
    KUIPER_ASSERT_OK_AND_ASSIGN(const Tensor gate, y.reshape({2, hidden}).value().select(0));
    KUIPER_ASSERT_OK_AND_ASSIGN(const Tensor up, y.reshape({2, hidden}).value().select(1));
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {hidden}).value();
    KUIPER_ASSERT_OK(cpu_.swiglu(gate, up, expected, ctx()));

    const Tensor gpu_x = upload(x);
    Tensor out = poisoned_gpu({hidden});
    const op::DecodeGemv gemv{.in = &gpu_x, .weight = &gpu_w, .epilogue = op::GemvEpilogue::kSwiglu, .out = &out,
                              .rope_kv = {}};
    KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
    EXPECT_LT(error_vs(download(out), expected), 1e-5) << describe(c);
  }
}

TEST_F(CudaDecodeGemv, NormSwiglu) {
  for (const Case& c : cases()) {
    const int64_t hidden = 45;  // odd: the last block holds fewer outputs than it could
    auto [w, gpu_w] = weight(c, 2 * hidden, c.cols);
    const Tensor x = test::random_tensor({1, c.cols}, rng_);
    const Tensor g = test::random_tensor({c.cols}, rng_, 0.5f, 1.5f);
    const Tensor y = reference(w, x, &g);
    KUIPER_ASSERT_OK_AND_ASSIGN(const Tensor gate, y.reshape({2, hidden}).value().select(0));
    KUIPER_ASSERT_OK_AND_ASSIGN(const Tensor up, y.reshape({2, hidden}).value().select(1));
    Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {hidden}).value();
    KUIPER_ASSERT_OK(cpu_.swiglu(gate, up, expected, ctx()));

    for (Norm norm : {Norm::kGivenSums, Norm::kFromX}) {
      const GemvInput in = gemv_input(x, g, norm);
      Tensor out = poisoned_gpu({hidden});
      op::DecodeGemv gemv{.weight = &gpu_w, .epilogue = op::GemvEpilogue::kSwiglu, .out = &out, .rope_kv = {}};
      in.into(gemv);
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      EXPECT_LT(error_vs(download(out), expected), 1e-5) << describe(c) << ", " << name(norm);
    }
  }
}

// The readers that quantize x to int8 in every block (int4 weights, int8 ones over 4096 rows)
// take an x that came with its norm's weight by quantizing x · g and dividing the scales by
// rms. That gives the int8 values that x normalized on the host gives, so the two GEMVs agree
// to fp32 rounding, but for an input whose rounding lands on the other side of a half step
// (each such input moves the outputs by ~4e-4 of their norm): bound 1e-3, where forgetting or
// doubling the division is off by O(1). Shapes: int4 short (split columns; swiglu's paired rows)
// and tall, int8 tall; int4 with and without minimums.
TEST_F(CudaDecodeGemv, StagedReadersNormalizeXAsTheyQuantizeIt) {
  struct Matrix {
    DataType dtype;
    int64_t rows, cols;
    bool with_min;
  };
  const Matrix matrices[] = {{DataType::kINT4, 4096, 4096, true}, {DataType::kINT4, 4096, 11008, false},
                             {DataType::kINT4, 6144, 4096, true}, {DataType::kINT4, 22016, 4096, false},
                             {DataType::kINT8, 6144, 4096, false}, {DataType::kINT8, 28672, 4096, false}};
  for (const Matrix& m : matrices) {
    SCOPED_TRACE(std::string(dtype_name(m.dtype)) + " " + std::to_string(m.rows) + "x" + std::to_string(m.cols));
    const op::Weight w = m.dtype == DataType::kINT4 ? test::random_int4_weight(m.rows, m.cols, 32, m.with_min, rng_)
                                                    : test::random_int8_weight(m.rows, m.cols, 64, rng_);
    const op::Weight gpu_w = test::to_device(w, *gpu_allocator_);
    const Tensor x = test::random_tensor({1, m.cols}, rng_);
    const Tensor g = test::random_tensor({m.cols}, rng_, 0.5f, 1.5f);
    Tensor normed = Tensor::zeros_cpu(DataType::kFP32, {1, m.cols}).value();
    KUIPER_ASSERT_OK(cpu_.rmsnorm(x, g, 1e-5f, normed, ctx()));
    const Tensor gpu_x = upload(x), gpu_g = upload(g), gpu_normed = upload(normed);
    for (const op::GemvEpilogue epilogue : {op::GemvEpilogue::kStore, op::GemvEpilogue::kSwiglu}) {
      const int64_t outputs = epilogue == op::GemvEpilogue::kSwiglu ? m.rows / 2 : m.rows;
      Tensor want = poisoned_gpu({outputs}), got = poisoned_gpu({outputs});
      const op::DecodeGemv host_normed{.in = &gpu_normed, .weight = &gpu_w, .epilogue = epilogue, .out = &want,
                                       .rope_kv = {}};
      const op::DecodeGemv with_g{.in = &gpu_x, .weight = &gpu_w, .in_norm_weight = &gpu_g, .norm_eps = 1e-5f,
                                  .epilogue = epilogue, .out = &got, .rope_kv = {}};
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(m.dtype)](host_normed, ctx()));
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(m.dtype)](with_g, ctx()));
      EXPECT_LT(error_vs(download(got), download(want)), 1e-3)
          << (epilogue == op::GemvEpilogue::kSwiglu ? "swiglu" : "store");
    }
  }
}

// x handed from one int8 or int4 GEMV to the next quantized in halves of 16 (kernel_table.h,
// decode_quantized_x_bytes). The producer: a residual accumulate handing the norm on (short and
// tall layouts) and a swiglu (tall), each writing its output quantized. Its bytes, decoded here,
// must give every output within half a step of its half's scale, with the half's Σ q. The
// consumer (short and tall layouts): given only the quantized x (its fp32 `in` zeros, so that
// reading that instead fails), within test::quantized_product's bounds of the product of the
// exact input (rounding in halves of 16 moves it no more than in blocks of 32).
TEST_F(CudaDecodeGemv, QuantizedOutputHandedToTheNextGemv) {
  const auto expect_quantized = [&](const Tensor& values, const Tensor& quantized, const std::string& what) {
    expect_quantized_halves(values, download(quantized), what);
  };
  // The consumer over in_quantized, against the product of `x` (its exact input).
  const auto expect_consumer = [&](const op::Weight& w, const Tensor& x, const Tensor* sumsq, const Tensor& quantized,
                                   const std::string& what) {
    ASSERT_TRUE(gpu_.decode_gemv_reads_quantized(w)) << what;
    const op::Weight gpu_w = test::to_device(w, *gpu_allocator_);
    const Tensor zeros = upload(Tensor::zeros_cpu(DataType::kFP32, {1, w.cols()}).value());
    Tensor out = poisoned_gpu({w.rows()});
    const op::DecodeGemv gemv{.in = &zeros, .weight = &gpu_w, .in_sumsq = sumsq, .norm_eps = 1e-5f, .out = &out,
                              .rope_kv = {}, .in_quantized = &quantized};
    KUIPER_ASSERT_OK(gpu_.decode_gemv[at(w.dtype())](gemv, ctx()));
    const Tensor got = download(out);
    const test::QuantizedProduct ref = test::quantized_product(x, w);
    for (int64_t r = 0; r < w.rows(); ++r) {
      ASSERT_NEAR(got.data<float>()[r], ref.out[r], ref.input_rounding[r] + 1e-5 * ref.magnitude[r] + 1e-30)
          << what << ", row " << r;
    }
  };
  const int64_t cols = 4096;
  // x · g / rms(x) from what the accumulate handed on: x · g and the sums of squares of x.
  const auto normalized = [](const Tensor& scaled, const Tensor& sumsq) {
    double total = 0;
    for (int64_t i = 0; i < sumsq.numel(); ++i) total += sumsq.data<float>()[i];
    const double inv_rms = 1 / std::sqrt(total / scaled.numel() + 1e-5);
    Tensor x = Tensor::zeros_cpu(DataType::kFP32, {1, scaled.numel()}).value();
    for (int64_t i = 0; i < scaled.numel(); ++i) x.data<float>()[i] = static_cast<float>(scaled.data<float>()[i] * inv_rms);
    return x;
  };
  for (const DataType dtype : {DataType::kINT4, DataType::kINT8}) {
    const bool int4 = dtype == DataType::kINT4;
    // int4 with and without minimums, as the cases below alternate.
    const auto weight = [&](int64_t rows, int64_t n, bool with_min) {
      return int4 ? test::random_int4_weight(rows, n, 32, with_min, rng_) : test::random_int8_weight(rows, n, 32, rng_);
    };
    const std::vector<int64_t> consumer_rows = {4096, 6144};
    for (const int64_t rows : {int64_t{4096}, int64_t{6144}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", accumulate " + std::to_string(rows) + " rows");
      const op::Weight w = weight(rows, cols, true);
      ASSERT_TRUE(gpu_.decode_gemv_quantizes_output(w, op::GemvEpilogue::kAccumulate));
      const op::Weight gpu_w = test::to_device(w, *gpu_allocator_);
      const Tensor gpu_x = upload(test::random_tensor({1, cols}, rng_));
      const Tensor g = upload(test::random_tensor({rows}, rng_, 0.5f, 1.5f));
      Tensor sum = upload(test::random_tensor({rows}, rng_)), normed = poisoned_gpu({rows});
      Tensor sumsq = poisoned_gpu({op::decode_sumsq_runs(rows)});
      Tensor quantized = upload(Tensor::zeros_cpu(DataType::kINT8, {op::decode_quantized_x_bytes(rows)}).value());
      const op::DecodeGemv gemv{.in = &gpu_x, .weight = &gpu_w, .epilogue = op::GemvEpilogue::kAccumulate, .out = &sum,
                                .next_norm_weight = &g, .next_normed = &normed, .next_sumsq = &sumsq, .rope_kv = {},
                                .out_quantized = &quantized};
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(dtype)](gemv, ctx()));
      expect_quantized(download(normed), quantized, "x · g");
      const Tensor x_next = normalized(download(normed), download(sumsq));
      for (const int64_t next_rows : consumer_rows) {
        expect_consumer(weight(next_rows, rows, next_rows == 4096), x_next, &sumsq, quantized,
                        "reader of " + std::to_string(next_rows) + " rows");
      }
    }
    {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", swiglu 2 x 4608 rows");
      const int64_t hidden = 4608;
      const op::Weight w = weight(2 * hidden, cols, false);
      ASSERT_TRUE(gpu_.decode_gemv_quantizes_output(w, op::GemvEpilogue::kSwiglu));
      const op::Weight gpu_w = test::to_device(w, *gpu_allocator_);
      const Tensor gpu_x = upload(test::random_tensor({1, cols}, rng_));
      Tensor out = poisoned_gpu({hidden});
      Tensor quantized = upload(Tensor::zeros_cpu(DataType::kINT8, {op::decode_quantized_x_bytes(hidden)}).value());
      const op::DecodeGemv gemv{.in = &gpu_x, .weight = &gpu_w, .epilogue = op::GemvEpilogue::kSwiglu, .out = &out,
                                .rope_kv = {}, .out_quantized = &quantized};
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(dtype)](gemv, ctx()));
      const Tensor h = download(out);
      expect_quantized(h, quantized, "silu(gate) · up");
      Tensor h_row = Tensor::zeros_cpu(DataType::kFP32, {1, hidden}).value();
      std::copy_n(h.data<float>(), hidden, h_row.data<float>());
      expect_consumer(weight(consumer_rows.front(), hidden, true), h_row, nullptr, quantized, "w2");
    }
    // A short swiglu's blocks hold 8 outputs, half of a half: refused, and the model does not ask.
    EXPECT_FALSE(gpu_.decode_gemv_quantizes_output(weight(2 * 1024, cols, false), op::GemvEpilogue::kSwiglu))
        << dtype_name(dtype);
  }
  // int8 groups of 16 are widened to fp32 a 16-byte chunk at a time: a block of 32 x does not fit
  // them, so they do not read x quantized.
  EXPECT_FALSE(gpu_.decode_gemv_reads_quantized(test::random_int8_weight(4096, cols, 16, rng_)));
}

TEST_F(CudaDecodeGemv, RopeAndCacheStoreWithEveryNorm) {
  const int head_dim = 16, q_heads = 6, kv_heads = 2;  // GQA 3:1
  const int64_t q_rows = q_heads * head_dim, kv = kv_heads * head_dim, context = 50;
  const int32_t pos = 37;
  const Tensor cos = test::random_tensor({64, head_dim / 2}, rng_);
  const Tensor sin = test::random_tensor({64, head_dim / 2}, rng_);
  const Tensor positions = int_tensor({pos});
  const Tensor gpu_cos = upload(cos), gpu_sin = upload(sin), gpu_positions = upload(positions);
  for (const Case& c : cases()) {
    for (Norm norm : kNorms) {
      const DataType cache_dtype = c.dtype == DataType::kINT8 ? DataType::kBF16 : c.dtype;
      auto [w, gpu_w] = weight(c, q_rows + 2 * kv, c.cols);
      const Tensor x = test::random_tensor({1, c.cols}, rng_);
      const Tensor g = test::random_tensor({c.cols}, rng_, 0.5f, 1.5f);
      Tensor y = reference(w, x, norm != Norm::kNone ? &g : nullptr);
      Tensor q = Tensor::view(y.buffer(), 0, DataType::kFP32, {1, q_rows}).value();
      Tensor k = Tensor::view(y.buffer(), q_rows * 4, DataType::kFP32, {1, kv}).value();
      const Tensor v = Tensor::view(y.buffer(), (q_rows + kv) * 4, DataType::kFP32, {1, kv}).value();
      KUIPER_ASSERT_OK(cpu_.rope(q, k, positions, cos, sin, head_dim, ctx()));

      const Tensor initial = round_to(test::random_tensor({context, kv}, rng_), cache_dtype);
      Tensor k_cache = upload(initial), v_cache = upload(initial);
      const GemvInput in = gemv_input(x, g, norm);
      Tensor out = poisoned_gpu({1, q_rows});
      op::DecodeGemv gemv{.weight = &gpu_w, .epilogue = op::GemvEpilogue::kRopeKv, .out = &out,
                          .rope_kv = {&gpu_positions, &gpu_cos, &gpu_sin, head_dim, static_cast<int>(q_rows),
                                      &k_cache, &v_cache}};
      in.into(gemv);
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      const std::string what = describe(c) + ", " + name(norm);
      EXPECT_LT(error_vs(download(out), q), 1e-5) << "q, " << what;

      const double rounding = cache_dtype == DataType::kFP32 ? 1e-5 : cache_dtype == DataType::kBF16 ? 8e-3 : 1e-3;
      expect_stored_rows(download(k_cache), initial, {pos}, k, rounding, "k cache, " + what);
      expect_stored_rows(download(v_cache), initial, {pos}, v, rounding, "v cache, " + what);
    }
  }
}

// The heights decode runs at, above the 256 rows the tests before reach (and where the row
// readers change: kInt8ShortRowsUpTo, kDenseShortRowsUpTo in decode_gemv.cu): LLaMA-2-7B's
// stacked q|k|v (12288) and gate|up (22016), LLaMA-3-8B's q|k|v (6144) and gate|up (28672),
// the classifiers (32000, 128256), 4096 wide; plus 8200 wide (too long for one pass: the warp
// kernel's paired rows) and 4099 wide (odd: the scalar rows). Every epilogue, with each form of
// its optional norm, against the CPU kernels run one after another; tolerances as for
// CudaDecodeGemv, but where int8 rows are multiplied in integers with x rounded to int8
// (tolerance() says why).
class CudaDecodeGemvTall : public CudaDecodeGemv {
 protected:
  void check_every_epilogue(DataType dtype) {
    struct Shape {
      int64_t rows, cols;
    };
    const Shape shapes[] = {{12288, 4096}, {22016, 4096}, {6144, 4096},   {28672, 4096},
                            {32000, 4096}, {128256, 4096}, {12288, 8200}, {12288, 4099}};
    for (const Shape& shape : shapes) {
      // int8 groups of 64 where they fit the row (16-byte chunks), else of 4 (scalar rows).
      const Case c{dtype, shape.cols, shape.cols % 64 == 0 ? 64 : 4};
      check(c, shape.rows);
      if (HasFailure()) return;  // one failing shape says enough; the others take long
    }
  }

 private:
  // Relative L2 bound on a case's outputs. Tall int8 matrices whose rows the integer reader
  // takes (a multiple of 32 long, groups of 32 or more: decode_gemv.cu) round x to int8 in blocks
  // of 32, which moves a product of random inputs by ~4e-3 of its size (test::QuantizedProduct's
  // bound, 1/254 of max|x| per input), and swiglu multiplies two such products: 2e-2. That
  // reader's arithmetic is held to 1e-5 on inputs int8 holds exactly in test_cuda_int8.cpp; here
  // the prologues and epilogues around it are checked, whose mistakes show at O(1).
  static double tolerance(const Case& c) {
    const bool rounds_x = c.dtype == DataType::kINT8 && c.cols % 32 == 0 && c.group >= 32;
    return rounds_x ? 2e-2 : 1e-5;
  }

  void check(const Case& c, int64_t rows) {
    const std::string what = describe(c) + ", " + std::to_string(rows) + " rows";
    SCOPED_TRACE(what);
    auto [w, gpu_w] = weight(c, rows, c.cols);
    const Tensor x = test::random_tensor({1, c.cols}, rng_);
    const Tensor g = test::random_tensor({c.cols}, rng_, 0.5f, 1.5f);
    const Tensor plain = reference(w, x, nullptr), normed = reference(w, x, &g);
    const Tensor gpu_x = upload(x);
    const GemvInput inputs[] = {gemv_input(x, g, Norm::kNone), gemv_input(x, g, Norm::kGivenSums),
                                gemv_input(x, g, Norm::kFromX)};

    for (Norm norm : kNorms) {
      Tensor out = poisoned_gpu({rows});
      op::DecodeGemv gemv{.weight = &gpu_w, .out = &out, .rope_kv = {}};
      inputs[static_cast<int>(norm)].into(gemv);
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      EXPECT_LT(error_vs(download(out), norm == Norm::kNone ? plain : normed), tolerance(c)) << "store, " << name(norm);
    }

    // The residual accumulate, and with a next norm its outputs: sum · g2 and Σ sum² per run.
    const Tensor residual = test::random_tensor({rows}, rng_);
    const Tensor g2 = test::random_tensor({rows}, rng_, 0.5f, 1.5f);
    const int64_t runs = op::decode_sumsq_runs(rows);
    Tensor sum_expected = Tensor::zeros_cpu(DataType::kFP32, {rows}).value();
    Tensor normed_expected = Tensor::zeros_cpu(DataType::kFP32, {rows}).value();
    std::vector<double> squares(runs, 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      const float v = residual.data<float>()[i] + plain.data<float>()[i];
      sum_expected.data<float>()[i] = v;
      normed_expected.data<float>()[i] = v * g2.data<float>()[i];
      squares[i / op::kDecodeSumsqRun] += double{v} * v;
    }
    const Tensor gpu_g2 = upload(g2);
    for (bool next_norm : {false, true}) {
      Tensor sum = upload(residual), next_normed = poisoned_gpu({rows}), next_sumsq = poisoned_gpu({runs});
      const op::DecodeGemv gemv{.in = &gpu_x, .weight = &gpu_w, .epilogue = op::GemvEpilogue::kAccumulate,
                                .out = &sum, .next_norm_weight = next_norm ? &gpu_g2 : nullptr,
                                .next_normed = next_norm ? &next_normed : nullptr,
                                .next_sumsq = next_norm ? &next_sumsq : nullptr, .rope_kv = {}};
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      EXPECT_LT(error_vs(download(sum), sum_expected), tolerance(c)) << "accumulate, next norm " << next_norm;
      if (!next_norm) continue;
      EXPECT_LT(error_vs(download(next_normed), normed_expected), tolerance(c)) << "next normed";
      const Tensor got = download(next_sumsq);
      EXPECT_LT(test::relative_error(got.data<float>(), squares.data(), squares.size()), tolerance(c))
          << "next sums of squares";
    }

    {  // Swiglu, norm-fed: the first half of the rows are gates, the second their ups.
      const int64_t hidden = rows / 2;
      KUIPER_ASSERT_OK_AND_ASSIGN(const Tensor gate, normed.reshape({2, hidden}).value().select(0));
      KUIPER_ASSERT_OK_AND_ASSIGN(const Tensor up, normed.reshape({2, hidden}).value().select(1));
      Tensor expected = Tensor::zeros_cpu(DataType::kFP32, {hidden}).value();
      KUIPER_ASSERT_OK(cpu_.swiglu(gate, up, expected, ctx()));
      for (Norm norm : {Norm::kGivenSums, Norm::kFromX}) {
        Tensor out = poisoned_gpu({hidden});
        op::DecodeGemv gemv{.weight = &gpu_w, .epilogue = op::GemvEpilogue::kSwiglu, .out = &out, .rope_kv = {}};
        inputs[static_cast<int>(norm)].into(gemv);
        KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
        EXPECT_LT(error_vs(download(out), expected), tolerance(c)) << "swiglu, " << name(norm);
      }
    }

    // Rope and the cache store, with each form of norm: the rows read as q | k | v with
    // 8 kv heads of 128 (every height above leaves a whole number of q heads).
    const int head_dim = 128;
    const int64_t kv = 8 * head_dim, q_rows = rows - 2 * kv, context = 50;
    ASSERT_EQ(q_rows % head_dim, 0);
    const int32_t pos = 37;
    const Tensor cos = test::random_tensor({64, head_dim / 2}, rng_);
    const Tensor sin = test::random_tensor({64, head_dim / 2}, rng_);
    const Tensor positions = int_tensor({pos});
    const Tensor gpu_cos = upload(cos), gpu_sin = upload(sin), gpu_positions = upload(positions);
    const DataType cache_dtype = c.dtype == DataType::kINT8 ? DataType::kBF16 : c.dtype;
    for (Norm norm : kNorms) {
      Tensor y = Tensor::zeros_cpu(DataType::kFP32, {1, rows}).value();
      const Tensor& source = norm == Norm::kNone ? plain : normed;
      std::memcpy(y.data<float>(), source.data<float>(), rows * sizeof(float));
      Tensor q = Tensor::view(y.buffer(), 0, DataType::kFP32, {1, q_rows}).value();
      Tensor k = Tensor::view(y.buffer(), q_rows * 4, DataType::kFP32, {1, kv}).value();
      const Tensor v = Tensor::view(y.buffer(), (q_rows + kv) * 4, DataType::kFP32, {1, kv}).value();
      KUIPER_ASSERT_OK(cpu_.rope(q, k, positions, cos, sin, head_dim, ctx()));

      const Tensor initial = round_to(test::random_tensor({context, kv}, rng_), cache_dtype);
      Tensor k_cache = upload(initial), v_cache = upload(initial);
      Tensor out = poisoned_gpu({1, q_rows});
      op::DecodeGemv gemv{.weight = &gpu_w, .epilogue = op::GemvEpilogue::kRopeKv, .out = &out,
                          .rope_kv = {&gpu_positions, &gpu_cos, &gpu_sin, head_dim, static_cast<int>(q_rows),
                                      &k_cache, &v_cache}};
      inputs[static_cast<int>(norm)].into(gemv);
      KUIPER_ASSERT_OK(gpu_.decode_gemv[at(c.dtype)](gemv, ctx()));
      EXPECT_LT(error_vs(download(out), q), tolerance(c)) << "rope q, " << name(norm);
      const double rounding = cache_dtype == DataType::kFP32 ? 1e-5 : cache_dtype == DataType::kBF16 ? 8e-3 : 1e-3;
      const std::string label = name(norm);
      expect_stored_rows(download(k_cache), initial, {pos}, k, rounding + tolerance(c), "k cache, " + label);
      expect_stored_rows(download(v_cache), initial, {pos}, v, rounding + tolerance(c), "v cache, " + label);
    }
  }
};

TEST_F(CudaDecodeGemvTall, Fp32) { check_every_epilogue(DataType::kFP32); }
TEST_F(CudaDecodeGemvTall, Fp16) { check_every_epilogue(DataType::kFP16); }
TEST_F(CudaDecodeGemvTall, Bf16) { check_every_epilogue(DataType::kBF16); }
TEST_F(CudaDecodeGemvTall, Int8) { check_every_epilogue(DataType::kINT8); }

// The prologue/epilogue pairs no kernel is built for (the residual accumulate with either form
// of input norm) are refused as unsupported, for each way of reading rows (one pass, 16-byte
// chunks, scalar), before anything is launched.
TEST_F(CudaDecodeGemv, RefusesCombinationsNotBuilt) {
  for (const Case& c : cases()) {
    auto [w, gpu_w] = weight(c, 64, c.cols);
    const Tensor x = test::random_tensor({1, c.cols}, rng_);
    const Tensor g = test::random_tensor({c.cols}, rng_, 0.5f, 1.5f);
    for (Norm norm : {Norm::kGivenSums, Norm::kFromX}) {
      const GemvInput in = gemv_input(x, g, norm);
      Tensor out = poisoned_gpu({64});
      op::DecodeGemv accumulate_with_norm{.weight = &gpu_w, .epilogue = op::GemvEpilogue::kAccumulate,
                                          .out = &out, .rope_kv = {}};
      in.into(accumulate_with_norm);
      const Status s = gpu_.decode_gemv[at(c.dtype)](accumulate_with_norm, ctx());
      EXPECT_EQ(s.code(), StatusCode::kUnsupported) << describe(c) << ", " << name(norm) << ": " << s.to_string();
    }
  }
}

TEST_F(CudaKernels, RejectsHostTensorsAndMismatchedShapes) {
  const Tensor host = test::random_tensor({4}, rng_);
  Tensor gpu_out = poisoned_gpu({4});
  EXPECT_FALSE(gpu_.add(host, host, gpu_out, ctx()).ok());
  const Tensor gpu_a = upload(test::random_tensor({5}, rng_));
  EXPECT_FALSE(gpu_.add(gpu_a, gpu_a, gpu_out, ctx()).ok());
}

}  // namespace
}  // namespace kuiper
