// CPU int4 kernels against double-precision products of the dequantized weights. Weights are
// random nibbles, scales and mins made here (not by the quantizer), decoded for the reference by
// test::int4_dequantized from the documented layout.
// Decode and prefill quantize their input to int8 in blocks of 32 where they can
// (int4_cpu_kernels.h), so each is checked twice: with inputs that int8 blocks represent exactly (each block is a power
// of two times integers in [-127, 127], one of them ±127), where only fp32 rounding may remain,
// and with arbitrary inputs against the bound the kernel documents.
#include <cmath>
#include <random>

#include "kuiper/model/llama_model.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cpu/int4_cpu_kernels.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCPU); }

constexpr int kInt4 = static_cast<int>(DataType::kINT4);

struct MatmulCase { int64_t rows, cols; int group; int64_t tokens; };

class Int4Matmul : public testing::TestWithParam<std::tuple<MatmulCase, bool>> {
 protected:
  void SetUp() override {
    const auto [c, with_min] = GetParam();
    case_ = c;
    rng_.seed(static_cast<unsigned>(c.rows * 131 + c.cols * 7 + c.tokens + with_min));
    w_ = test::random_int4_weight(c.rows, c.cols, c.group, with_min, rng_);
  }
  Tensor run(const Tensor& in) {
    Tensor out = Tensor::zeros_cpu(DataType::kFP32, {case_.tokens, case_.rows}).value();
    auto kernel = op::cpu_kernel_table().matmul[kInt4];
    EXPECT_NE(kernel, nullptr);
    const Status s = kernel(in, w_, out, ctx());
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
  MatmulCase case_{};
  std::mt19937 rng_;
  op::Weight w_;
};

// Only fp32 rounding between kernel and reference: 1e-5 of the magnitude of the summed terms.
TEST_P(Int4Matmul, ExactOnInputsInt8Holds) {
  const Tensor in = test::int8_exact_input(case_.tokens, case_.cols, rng_);
  const Tensor out = run(in);
  const test::QuantizedProduct ref = test::quantized_product(in, w_);
  for (size_t i = 0; i < ref.out.size(); ++i) {
    ASSERT_NEAR(out.data<float>()[i], ref.out[i], 1e-5 * ref.magnitude[i] + 1e-30) << "output " << i;
  }
}

// Any input: within the documented bound of the input's int8 rounding, plus fp32 rounding.
TEST_P(Int4Matmul, WithinInputRoundingBoundOnAnyInput) {
  const Tensor in = test::random_tensor({case_.tokens, case_.cols}, rng_);
  const Tensor out = run(in);
  const test::QuantizedProduct ref = test::quantized_product(in, w_);
  for (size_t i = 0; i < ref.out.size(); ++i) {
    ASSERT_NEAR(out.data<float>()[i], ref.out[i], ref.input_rounding[i] + 1e-5 * ref.magnitude[i]) << "output " << i;
  }
  if (case_.tokens > 1 && !op::cpu::int4_gemv_quantizes_input(w_)) {  // prefill on fp32 inputs: no input rounding
    EXPECT_LT(test::relative_error(out.data<float>(), ref.out.data(), ref.out.size()), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int4Matmul,
    testing::Combine(
        testing::Values(MatmulCase{7, 64, 32, 1},       // odd rows, two groups per row
                        MatmulCase{33, 128, 64, 1},     // several groups per row
                        MatmulCase{5, 256, 128, 1},     // groups of 128
                        MatmulCase{9, 96, 32, 1},       // cols not a multiple of 64
                        MatmulCase{64, 172, 32, 1},     // groups run across rows (stories260K w2): fp32 path
                        MatmulCase{96, 288, 64, 1},     // GQA k/v [kv_dim, dim]: 288 not a multiple of 64
                        MatmulCase{96, 288, 128, 1},    // and of 128
                        MatmulCase{6, 40, 8, 1},        // group below 32: fp32 path
                        MatmulCase{1024, 512, 32, 1},   // large enough to be threaded
                        MatmulCase{7, 64, 32, 3},       // prefill, one panel
                        MatmulCase{300, 128, 64, 17},   // prefill: eight tokens at a time, one left; panels
                        MatmulCase{1024, 256, 32, 6},   // prefill threaded, fewer tokens than eight
                        MatmulCase{64, 172, 32, 5},     // prefill with groups across rows
                        MatmulCase{96, 288, 128, 4}),   // prefill, GQA shape
        testing::Bool()));  // with a per-group minimum

TEST(Int4MatmulArgs, RefusesMalformedWeightsAndShapes) {
  std::mt19937 rng(1);
  const op::Weight w = test::random_int4_weight(4, 64, 32, false, rng);
  auto kernel = op::cpu_kernel_table().matmul[kInt4];
  Tensor in = test::random_tensor({1, 64}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::zeros_cpu(DataType::kFP32, {1, 4}));
  KUIPER_ASSERT_OK(kernel(in, w, out, ctx()));
  op::Weight no_scales = w;
  no_scales.scales = Tensor();
  EXPECT_FALSE(kernel(in, no_scales, out, ctx()).ok());
  op::Weight wrong_group = w;
  wrong_group.group_size = 16;  // would need twice the scales
  EXPECT_FALSE(kernel(in, wrong_group, out, ctx()).ok());
  op::Weight short_mins = w;
  short_mins.mins = Tensor::zeros_cpu(DataType::kFP32, {3}).value();
  EXPECT_FALSE(kernel(in, short_mins, out, ctx()).ok());
  Tensor short_in = test::random_tensor({1, 32}, rng);
  EXPECT_FALSE(kernel(short_in, w, out, ctx()).ok());
  op::Weight int8_weight = test::random_int8_weight(4, 64, 32, rng);
  EXPECT_FALSE(kernel(in, int8_weight, out, ctx()).ok());
}

// stories260K quantized to int4 at load, decoded one token at a time, against one prefill of the
// same tokens. With AVX2 both round the inputs of every matmul whose shape allows it to int8
// alike (its w2, 172 columns, runs on fp32 inputs), so only the order of fp32 sums differs:
// 7.4e-7 measured. Before prefill quantized (fp32 inputs), 1.06e-2 on the searched codes, which
// is what the bound 2e-2, the CUDA int4 model's, was set by; test_cuda_int4.cpp builds on it.
TEST(Int4Model, DecodeLogitsNearPrefill) {
  ModelOptions options;
  options.weight_dtype = DataType::kINT4;
  const double worst = test::stories_decode_logit_error(options, options);
  std::printf("int4 model, CPU decode against CPU prefill: worst relative logit error %.3g (bound 2e-2)\n", worst);
  EXPECT_LT(worst, 2e-2);
}

TEST(Int4Embedding, DequantizesRowsAndRefusesBadIds) {
  std::mt19937 rng(5);
  for (bool with_min : {false, true}) {
    const op::Weight table = test::random_int4_weight(10, 24, 16, with_min, rng);  // groups cross rows
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor tokens, Tensor::zeros_cpu(DataType::kINT32, {3}));
    tokens.data<int32_t>()[0] = 9;
    tokens.data<int32_t>()[1] = 0;
    tokens.data<int32_t>()[2] = 5;
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::zeros_cpu(DataType::kFP32, {3, 24}));
    auto kernel = op::cpu_kernel_table().embedding[kInt4];
    ASSERT_NE(kernel, nullptr);
    KUIPER_ASSERT_OK(kernel(tokens, table, out, ctx()));
    for (int t = 0; t < 3; ++t) {
      for (int c = 0; c < 24; ++c) {
        const double ref = test::int4_dequantized(table, tokens.data<int32_t>()[t], c);
        EXPECT_NEAR(out.data<float>()[t * 24 + c], ref, 1e-6 * (std::fabs(ref) + 0.1));
      }
    }
    tokens.data<int32_t>()[1] = 10;
    EXPECT_EQ(kernel(tokens, table, out, ctx()).code(), StatusCode::kOutOfRange);
  }
}

}  // namespace
}  // namespace kuiper
