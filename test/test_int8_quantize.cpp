// Group-wise int8 quantization: every weight comes back within half a step of its group's
// scale, the scale is max|w| / 127 of exactly the elements the layout says, and malformed
// requests are refused.
#include <cmath>
#include <random>

#include "kuiper/base/half.h"
#include "kuiper/model/dequantize.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/model/weight_convert.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

// Checks q/scales against w recomputed here in double precision from the flat group layout.
void expect_faithful(const Tensor& w, const op::Weight& q, int group_size) {
  ASSERT_EQ(q.values.shape(), w.shape());
  ASSERT_EQ(q.group_size, group_size);
  ASSERT_EQ(q.scales.numel(), w.numel() / group_size);
  const float* wv = w.data<float>();
  for (int64_t g = 0; g < q.scales.numel(); ++g) {
    double max_abs = 0;
    for (int i = 0; i < group_size; ++i) max_abs = std::max(max_abs, std::fabs(double{wv[g * group_size + i]}));
    const double scale = q.scales.data<float>()[g];
    EXPECT_NEAR(scale, max_abs / 127.0, 1e-6 * max_abs) << "group " << g;
    for (int i = 0; i < group_size; ++i) {
      const int64_t k = g * group_size + i;
      const int qi = q.values.data<int8_t>()[k];
      ASSERT_GE(qi, -127);
      ASSERT_LE(qi, 127);
      EXPECT_LE(std::fabs(qi * scale - wv[k]), scale / 2 * (1 + 1e-5)) << "element " << k;
    }
  }
}

TEST(Int8Quantize, ErrorWithinHalfAStepForManyShapes) {
  std::mt19937 rng(7);
  struct Case { int64_t rows, cols; int group; };
  for (Case c : {Case{3, 64, 64}, Case{7, 128, 32}, Case{64, 172, 64}, Case{5, 48, 16}, Case{9, 8, 8}}) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.cols << " G=" << c.group);
    Tensor w = test::random_tensor({c.rows, c.cols}, rng, -2.f, 2.f);
    w.data<float>()[c.rows * c.cols / 2] = 40.f;  // an outlier only affects its own group
    KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q, quantize_int8(w, c.group));
    expect_faithful(w, q, c.group);
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor back, dequantize_int8(q));
    KUIPER_ASSERT_OK_AND_ASSIGN(double err, max_quantization_error(w, q));
    double worst = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      worst = std::max(worst, std::fabs(double{back.data<float>()[i]} - w.data<float>()[i]));
    }
    EXPECT_DOUBLE_EQ(err, worst);
    EXPECT_LE(err, 40.0 / 127 / 2 * (1 + 1e-5));
  }
}

TEST(Int8Quantize, LargestMagnitudeMapsTo127AndZerosStayZero) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::zeros_cpu(DataType::kFP32, {2, 4}));
  float* p = w.data<float>();
  p[0] = -0.5f; p[1] = 0.25f; p[2] = 0.125f; p[3] = 0.f;  // second group left all zero
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q, quantize_int8(w, 4));
  EXPECT_EQ(q.values.data<int8_t>()[0], -127);
  EXPECT_EQ(q.values.data<int8_t>()[1], 64);  // 63.5 rounds to even
  EXPECT_FLOAT_EQ(q.scales.data<float>()[0], 0.5f / 127.f);
  EXPECT_EQ(q.scales.data<float>()[1], 0.f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(q.values.data<int8_t>()[i], 0);
}

TEST(Int8Quantize, AcceptsHalfPrecisionInput) {
  std::mt19937 rng(3);
  Tensor w = test::random_tensor({4, 32}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor bf, Tensor::zeros_cpu(DataType::kBF16, {4, 32}));
  for (int64_t i = 0; i < w.numel(); ++i) {
    bf.data<uint16_t>()[i] = float_to_bf16(w.data<float>()[i]);
    w.data<float>()[i] = bf16_to_float(bf.data<uint16_t>()[i]);  // the values bf16 holds
  }
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q, quantize_int8(bf, 32));
  expect_faithful(w, q, 32);
}

TEST(Int8Quantize, RefusesPartialGroupsAndBadWeights) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::zeros_cpu(DataType::kFP32, {3, 10}));
  auto q = quantize_int8(w, 64);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("not a whole number of groups"), std::string::npos);
  EXPECT_FALSE(quantize_int8(w, 0).ok());
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight good, quantize_int8(w, 10));
  op::Weight bad = good;
  KUIPER_ASSERT_OK_AND_ASSIGN(bad.scales, Tensor::zeros_cpu(DataType::kFP32, {2}));
  EXPECT_FALSE(op::check_int8_weight(bad).ok());
  bad = good;
  bad.group_size = 7;
  EXPECT_FALSE(op::check_int8_weight(bad).ok());
}

// Groups run over the flattened matrix: 4 rows of 6 in groups of 4 are 6 groups, and rows
// [2, 4) are groups [3, 6). Rows that split a group cannot be a weight of their own.
TEST(Int8Quantize, RowSlicesTakeTheScalesOfTheirGroups) {
  std::mt19937 rng(7);
  const Tensor w = test::random_tensor({4, 6}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q, quantize_int8(w, 4));
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight rows, q.slice_rows(2, 4));
  ASSERT_EQ(rows.scales.numel(), 3);
  for (int g = 0; g < 3; ++g) EXPECT_EQ(rows.scales.data<float>()[g], q.scales.data<float>()[3 + g]) << g;
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor whole, dequantize_int8(q));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor part, dequantize_int8(rows));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(part.data<float>()[i], whole.data<float>()[12 + i]) << i;
  auto split = q.slice_rows(1, 3);
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("group boundaries"), std::string::npos) << split.status().message();
}

TEST(Int8Quantize, ConvertWeightQuantizesAndDequantizes) {
  std::mt19937 rng(11);
  Tensor w = test::random_tensor({8, 128}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q, convert_weight(op::Weight{w, Tensor(), 0}, DataType::kINT8, cpu_allocator()));
  EXPECT_EQ(q.group_size, kDefaultInt8GroupSize);
  expect_faithful(w, q, kDefaultInt8GroupSize);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight f, convert_weight(q, DataType::kFP32, cpu_allocator()));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor back, dequantize_int8(q));
  EXPECT_TRUE(f.scales.is_empty());
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(f.values.data<float>()[i], back.data<float>()[i]);
}

}  // namespace
}  // namespace kuiper
