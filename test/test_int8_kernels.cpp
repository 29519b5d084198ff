// CPU int8 kernels against double-precision products of the dequantized weights. Weights are
// random int8 values and scales made here (not by the quantizer), and the reference finds each
// element's scale from the flat group layout on its own.
#include <cmath>
#include <random>

#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernel_table.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

// Kernels called directly run in the test program's context.
const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCPU); }

using test::random_int8_weight;

double dequantized(const op::Weight& w, int64_t r, int64_t c) {
  const int64_t flat = r * w.cols() + c;
  return static_cast<double>(w.values.data<int8_t>()[flat]) * w.scales.data<float>()[flat / w.group_size];
}

std::vector<double> reference_matmul(const Tensor& in, const op::Weight& w) {
  const int64_t tokens = in.numel() / w.cols();
  std::vector<double> out(tokens * w.rows());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < w.rows(); ++r) {
      double sum = 0;
      for (int64_t c = 0; c < w.cols(); ++c) sum += dequantized(w, r, c) * in.data<float>()[t * w.cols() + c];
      out[t * w.rows() + r] = sum;
    }
  }
  return out;
}

struct MatmulCase { int64_t rows, cols; int group; int64_t tokens; };

class Int8Matmul : public testing::TestWithParam<MatmulCase> {};

TEST_P(Int8Matmul, MatchesDoubleReference) {
  const MatmulCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.rows * 131 + c.cols * 7 + c.tokens));
  const op::Weight w = random_int8_weight(c.rows, c.cols, c.group, rng);
  Tensor in = test::random_tensor({c.tokens, c.cols}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::zeros_cpu(DataType::kFP32, {c.tokens, c.rows}));
  auto kernel = op::cpu_kernel_table().matmul[static_cast<int>(DataType::kINT8)];
  ASSERT_NE(kernel, nullptr);
  KUIPER_ASSERT_OK(kernel(in, w, out, ctx()));
  const std::vector<double> ref = reference_matmul(in, w);
  EXPECT_LT(test::relative_error(out.data<float>(), ref.data(), ref.size()), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8Matmul,
    testing::Values(MatmulCase{7, 64, 64, 1},        // odd rows, one group per row
                    MatmulCase{33, 128, 32, 1},      // several groups per row
                    MatmulCase{5, 48, 16, 1},        // smallest AVX2 group
                    MatmulCase{6, 40, 8, 1},         // group not a multiple of 16: portable path
                    MatmulCase{64, 172, 64, 1},      // groups run across rows (stories260K w2)
                    MatmulCase{1024, 512, 64, 1},    // large enough to be threaded
                    MatmulCase{7, 64, 64, 3},        // prefill, one panel
                    MatmulCase{300, 128, 32, 17},    // prefill across panel boundaries
                    MatmulCase{64, 172, 64, 5}));    // prefill with groups across rows

TEST(Int8Matmul, RefusesMalformedWeightsAndShapes) {
  std::mt19937 rng(1);
  op::Weight w = random_int8_weight(4, 64, 64, rng);
  auto kernel = op::cpu_kernel_table().matmul[static_cast<int>(DataType::kINT8)];
  Tensor in = test::random_tensor({1, 64}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::zeros_cpu(DataType::kFP32, {1, 4}));
  op::Weight no_scales = w;
  no_scales.scales = Tensor();
  EXPECT_FALSE(kernel(in, no_scales, out, ctx()).ok());
  op::Weight wrong_group = w;
  wrong_group.group_size = 32;  // would need twice the scales
  EXPECT_FALSE(kernel(in, wrong_group, out, ctx()).ok());
  Tensor short_in = test::random_tensor({1, 32}, rng);
  EXPECT_FALSE(kernel(short_in, w, out, ctx()).ok());
  op::Weight float_weight{test::random_tensor({4, 64}, rng), Tensor(), 0};
  EXPECT_FALSE(kernel(in, float_weight, out, ctx()).ok());
}

TEST(Int8Embedding, DequantizesRowsAndRefusesBadIds) {
  std::mt19937 rng(5);
  const op::Weight table = random_int8_weight(10, 24, 16, rng);  // groups cross rows
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor tokens, Tensor::zeros_cpu(DataType::kINT32, {3}));
  tokens.data<int32_t>()[0] = 9;
  tokens.data<int32_t>()[1] = 0;
  tokens.data<int32_t>()[2] = 5;
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::zeros_cpu(DataType::kFP32, {3, 24}));
  auto kernel = op::cpu_kernel_table().embedding[static_cast<int>(DataType::kINT8)];
  ASSERT_NE(kernel, nullptr);
  KUIPER_ASSERT_OK(kernel(tokens, table, out, ctx()));
  for (int t = 0; t < 3; ++t) {
    for (int c = 0; c < 24; ++c) {
      EXPECT_FLOAT_EQ(out.data<float>()[t * 24 + c], dequantized(table, tokens.data<int32_t>()[t], c));
    }
  }
  tokens.data<int32_t>()[1] = 10;
  EXPECT_EQ(kernel(tokens, table, out, ctx()).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace kuiper
