// The tensor-core GEMM for int8 and int4 weights (quantized_mma.cu: batched decode of 9-64
// tokens), against a double product of the operands it multiplies: x rounded to bf16, and each
// weight decoded here from the stored bytes (op/int8_weight.h, op/int4_weight.h), computed in
// fp32 as the dequantize kernels compute it (one fused multiply-add with a minimum) and rounded
// to bf16. The kernel's only other rounding is its fp32 sums, so each output must lie within
// 1e-5 of the magnitude of its summed terms: a misplaced weight, scale, token or split moves an
// output by a whole term. Also: the table's matmul takes this path for 9-64 tokens, and a NaN
// input stays in its token. Skips when no GPU can be used.
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "kuiper/base/half.h"
#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "test/test_util.h"

namespace kuiper {
namespace {

const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCUDA); }

double bf16_rounded(float v) { return bf16_to_float(float_to_bf16(v)); }

// Weight [r, c] of a host weight as the kernel multiplies it.
double multiplied_weight(const op::Weight& w, int64_t r, int64_t c) {
  const int64_t flat = r * w.cols() + c, group = flat / w.group_size;
  const float scale = w.scales.data<float>()[group];
  if (w.dtype() == DataType::kINT8) return bf16_rounded(static_cast<float>(w.values.data<int8_t>()[flat]) * scale);
  const int q = test::int4_code(w, r, c);
  if (w.mins.is_empty()) return bf16_rounded(scale * static_cast<float>(q - 8));
  return bf16_rounded(std::fma(scale, static_cast<float>(q), w.mins.data<float>()[group]));
}

class CudaQuantizedMma : public test::GpuTest<::testing::TestWithParam<test::WeightScheme>> {
 protected:
  op::Weight random_weight(int64_t rows, int64_t cols, int group) {
    return test::random_weight(GetParam(), rows, cols, group, rng_);
  }

  std::vector<float> product(const Tensor& in, const op::Weight& gpu_w) {
    const int64_t tokens = in.numel() / gpu_w.cols();
    EXPECT_TRUE(op::cuda::quantized_mma_fits(tokens, gpu_w));
    Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {tokens, gpu_w.rows()}).value());
    const Status s = op::cuda::quantized_mma(upload(in), gpu_w, out, ctx());
    EXPECT_TRUE(s.ok()) << s.to_string();
    return test::to_host(out);
  }

  void check(int64_t rows, int64_t cols, int group) {
    const op::Weight w = random_weight(rows, cols, group);
    const op::Weight gpu_w = upload(w);
    std::vector<double> weights(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) weights[r * cols + c] = multiplied_weight(w, r, c);
    }
    for (const int64_t tokens : {9, 16, 17, 33, 64}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", groups of " + std::to_string(group) + ", " +
                   std::to_string(tokens) + " tokens");
      const Tensor in = test::random_tensor({tokens, cols}, rng_);
      const std::vector<float> out = product(in, gpu_w);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double sum = 0, magnitude = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double term = weights[r * cols + c] * bf16_rounded(in.data<float>()[t * cols + c]);
            sum += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(out[t * rows + r], sum, 1e-5 * magnitude + 1e-30) << "token " << t << ", row " << r;
        }
      }
    }
  }

  std::mt19937 rng_{17};
};

TEST_P(CudaQuantizedMma, MatchesDoubleProductOfItsOperands) {
  check(32, 128, 32);     // one warp of a block's four, one step (int8: two)
  check(96, 384, 64);     // three warps, three steps (int8: six), lanes of two groups in a step
  check(64, 4096, 128);   // the columns split eight ways, a group over two steps (int8)
  check(1024, 1024, 32);  // eight blocks, two splits
}

TEST_P(CudaQuantizedMma, TableTakesItFrom9To64Tokens) {
  const op::Weight w = random_weight(64, 512, 32);
  const op::Weight gpu_w = upload(w);
  const int dtype = static_cast<int>(test::weight_scheme_dtype(GetParam()));
  for (const int64_t tokens : {9, 40, 64}) {
    const Tensor in = test::random_tensor({tokens, 512}, rng_);
    Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {tokens, 64}).value());
    const Status s = op::cuda_kernel_table().matmul[dtype](upload(in), gpu_w, out, ctx());
    ASSERT_TRUE(s.ok()) << s.to_string();
    const std::vector<float> direct = product(in, gpu_w), table = test::to_host(out);
    for (size_t i = 0; i < direct.size(); ++i) ASSERT_EQ(direct[i], table[i]) << tokens << " tokens, output " << i;
  }
}

TEST_P(CudaQuantizedMma, NaNStaysInItsToken) {
  const op::Weight gpu_w = upload(random_weight(64, 256, 32));
  Tensor in = test::random_tensor({12, 256}, rng_);
  in.data<float>()[5 * 256 + 200] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> out = product(in, gpu_w);
  for (int64_t t = 0; t < 12; ++t) {
    for (int64_t r = 0; r < 64; ++r) {
      EXPECT_EQ(std::isnan(out[t * 64 + r]), t == 5) << "token " << t << ", row " << r << ": " << out[t * 64 + r];
    }
  }
}

TEST(CudaQuantizedMmaShapes, FitsOnlyWhatItTiles) {
  std::mt19937 rng(3);
  const op::Weight w = test::random_int8_weight(64, 256, 64, rng);
  EXPECT_TRUE(op::cuda::quantized_mma_fits(9, w));
  EXPECT_TRUE(op::cuda::quantized_mma_fits(64, w));
  EXPECT_FALSE(op::cuda::quantized_mma_fits(65, w));
  EXPECT_FALSE(op::cuda::quantized_mma_fits(9, test::random_int8_weight(48, 256, 64, rng)));  // rows
  EXPECT_FALSE(op::cuda::quantized_mma_fits(9, test::random_int8_weight(64, 320, 64, rng)));  // cols
  EXPECT_FALSE(op::cuda::quantized_mma_fits(9, test::random_int8_weight(64, 256, 16, rng)));  // group
  // fp16 scales, as on the GPU, starting 2 bytes past a 4-byte boundary: the kernel copies them
  // in aligned pairs.
  op::Weight odd_scales = w;
  const int64_t groups = w.scales.numel();
  const Tensor halves = Tensor::zeros_cpu(DataType::kFP16, {groups + 1}).value();
  odd_scales.scales = halves.slice(1, groups + 1).value();
  EXPECT_FALSE(op::cuda::quantized_mma_fits(9, odd_scales));
  odd_scales.scales = halves.slice(0, groups).value();
  EXPECT_TRUE(op::cuda::quantized_mma_fits(9, odd_scales));
}

INSTANTIATE_TEST_SUITE_P(Schemes, CudaQuantizedMma, testing::ValuesIn(test::kWeightSchemes), test::weight_scheme_name);

}  // namespace
}  // namespace kuiper
