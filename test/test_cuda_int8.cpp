// CUDA int8 kernels against the CPU int8 kernels (themselves checked against double references
// in test_int8_kernels.cpp), on the same random int8 weights. Skips when no GPU can be used.
// Tolerances (relative L2 error): decode GEMV 1e-5 (fp32 arithmetic, exact widening); prefill
// 1e-2 (weights dequantized to bf16 and activations rounded to bf16 for the tensor cores).
// Also prints the decode GEMV's bandwidth against a device-to-device copy (target ≥ 80%).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "kuiper/base/device.h"
#include "kuiper/op/kernel_table.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::random_int8_weight;

constexpr int kInt8 = static_cast<int>(DataType::kINT8);

class CudaInt8 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
    gpu_ = cuda_allocator().value();
  }
  Tensor upload(const Tensor& t) { return t.to(*gpu_).value(); }
  op::Weight upload(const op::Weight& w) { return {upload(w.values), upload(w.scales), w.group_size}; }
  Tensor download(const Tensor& t) { return t.to(cpu_allocator()).value(); }

  // CUDA result vs CPU result of in[T, cols] · Wᵀ.
  double matmul_error(int64_t rows, int64_t cols, int group, int64_t tokens) {
    const op::Weight w = random_int8_weight(rows, cols, group, rng_);
    const Tensor in = test::random_tensor({tokens, cols}, rng_);
    Tensor cpu_out = Tensor::zeros_cpu(DataType::kFP32, {tokens, rows}).value();
    Tensor gpu_out = upload(cpu_out);
    Tensor gpu_in = upload(in);
    const op::Weight gpu_w = upload(w);
    EXPECT_TRUE(op::cpu_kernel_table().matmul[kInt8](in, w, cpu_out, nullptr).ok());
    const Status s = op::cuda_kernel_table().matmul[kInt8](gpu_in, gpu_w, gpu_out, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(synchronize(nullptr).ok());
    const Tensor back = download(gpu_out);
    return test::relative_error(back.data<float>(), cpu_out.data<float>(), back.numel());
  }

  Allocator* gpu_ = nullptr;
  std::mt19937 rng_{4};
};

TEST_F(CudaInt8, DecodeGemvMatchesCpu) {
  EXPECT_LT(matmul_error(7, 64, 64, 1), 1e-5);       // odd rows
  EXPECT_LT(matmul_error(33, 128, 32, 1), 1e-5);     // several groups per row
  EXPECT_LT(matmul_error(4096, 4096, 64, 1), 1e-5);  // a LLaMA-sized matrix
  EXPECT_LT(matmul_error(11, 4096, 128, 1), 1e-5);   // long rows: several batches per lane
  EXPECT_LT(matmul_error(64, 172, 64, 1), 1e-5);     // groups across rows: scalar kernel
  EXPECT_LT(matmul_error(6, 40, 8, 1), 1e-5);        // group below 16: scalar kernel
}

TEST_F(CudaInt8, PrefillMatchesCpu) {
  EXPECT_LT(matmul_error(300, 128, 32, 17), 1e-2);
  EXPECT_LT(matmul_error(64, 172, 64, 5), 1e-2);
  EXPECT_LT(matmul_error(1024, 768, 64, 128), 1e-2);
  EXPECT_LT(matmul_error(6, 40, 8, 5), 1e-2);  // group below 16: weights dequantized one at a time
  EXPECT_LT(matmul_error(7, 40, 8, 3), 1e-2);  // and a count not a multiple of 16
}

TEST_F(CudaInt8, RefusesMalformedWeights) {
  op::Weight w = upload(random_int8_weight(4, 64, 64, rng_));
  w.group_size = 32;  // would need twice the scales
  Tensor in = upload(test::random_tensor({1, 64}, rng_));
  Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {1, 4}).value());
  EXPECT_FALSE(op::cuda_kernel_table().matmul[kInt8](in, w, out, nullptr).ok());
}

TEST_F(CudaInt8, EmbeddingMatchesCpuAndZeroesBadIds) {
  const op::Weight table = random_int8_weight(10, 24, 16, rng_);  // groups cross rows
  Tensor ids = Tensor::zeros_cpu(DataType::kINT32, {3}).value();
  ids.data<int32_t>()[0] = 9;
  ids.data<int32_t>()[1] = 0;
  ids.data<int32_t>()[2] = 5;
  Tensor cpu_out = Tensor::zeros_cpu(DataType::kFP32, {3, 24}).value();
  ASSERT_TRUE(op::cpu_kernel_table().embedding[kInt8](ids, table, cpu_out, nullptr).ok());
  Tensor gpu_out = upload(cpu_out);
  ids.data<int32_t>()[1] = 10;  // out of range on the GPU: a zero row
  Tensor gpu_ids = upload(ids);
  ASSERT_TRUE(op::cuda_kernel_table().embedding[kInt8](gpu_ids, upload(table), gpu_out, nullptr).ok());
  const Tensor back = download(gpu_out);
  for (int c = 0; c < 24; ++c) {
    EXPECT_EQ(back.data<float>()[c], cpu_out.data<float>()[c]);
    EXPECT_EQ(back.data<float>()[24 + c], 0.f);
    EXPECT_EQ(back.data<float>()[48 + c], cpu_out.data<float>()[48 + c]);
  }
}

// Not a pass/fail check (timings depend on the GPU): reports the decode GEMV's effective
// bandwidth (int8 bytes + scales) as a fraction of a device-to-device copy of the same bytes.
TEST_F(CudaInt8, ReportsDecodeBandwidth) {
  using Clock = std::chrono::steady_clock;
  const int64_t rows = 14336, cols = 4096;
  const op::Weight w = upload(random_int8_weight(rows, cols, 64, rng_));
  Tensor in = upload(test::random_tensor({1, cols}, rng_));
  Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {1, rows}).value());
  const size_t bytes = w.values.nbytes() + w.scales.nbytes();
  void* copy_src = gpu_->allocate(bytes).value();
  void* copy_dst = gpu_->allocate(bytes).value();
  const auto best_seconds = [](auto&& run) {
    double best = 1e30;
    for (int rep = 0; rep < 20; ++rep) {
      const auto t0 = Clock::now();
      run();
      EXPECT_TRUE(synchronize(nullptr).ok());
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  };
  const auto kernel = op::cuda_kernel_table().matmul[kInt8];
  const double gemv_s = best_seconds([&] { EXPECT_TRUE(kernel(in, w, out, nullptr).ok()); });
  const double copy_s = best_seconds([&] {
    EXPECT_TRUE(copy_bytes(copy_dst, DeviceType::kCUDA, copy_src, DeviceType::kCUDA, bytes, nullptr).ok());
  });
  gpu_->release(copy_src, bytes);
  gpu_->release(copy_dst, bytes);
  // A copy moves each byte twice (read + write); the GEMV reads it once.
  const double gemv_gbs = bytes / gemv_s / 1e9, copy_gbs = 2.0 * bytes / copy_s / 1e9;
  std::printf("int8 GEMV %lldx%lld: %.0f GB/s; device copy %.0f GB/s (read+write); ratio %.0f%%\n",
              static_cast<long long>(rows), static_cast<long long>(cols), gemv_gbs, copy_gbs,
              100.0 * gemv_gbs / copy_gbs);
  RecordProperty("gemv_int8_fraction_of_copy_bandwidth", std::to_string(gemv_gbs / copy_gbs));
}

}  // namespace
}  // namespace kuiper
