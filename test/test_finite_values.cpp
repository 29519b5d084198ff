// first_non_finite (the check before a matrix is quantized) and max_abs_difference (an export's
// reported error), on tensors past the size where both run on several threads, with the answer
// placed where a wrong reduction would miss it.
#include <cmath>
#include <limits>

#include "kuiper/model/dequantize.h"
#include "kuiper/model/finite_values.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

constexpr int64_t kLarge = (int64_t{1} << 21) + 37;  // above the threaded size, not a round split

Tensor filled(int64_t n, float value) {
  Tensor t = Tensor::zeros_cpu(DataType::kFP32, {n}).value();
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value;
  return t;
}

TEST(FiniteValues, FindsTheFirstBadValueAmongMany) {
  Tensor t = filled(kLarge, 0.5f);
  EXPECT_EQ(first_non_finite(t.data<float>(), kLarge), -1);
  t.data<float>()[kLarge - 1] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(first_non_finite(t.data<float>(), kLarge), kLarge - 1);
  t.data<float>()[1'500'001] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(first_non_finite(t.data<float>(), kLarge), 1'500'001);
  t.data<float>()[3] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(first_non_finite(t.data<float>(), kLarge), 3);
  EXPECT_EQ(first_non_finite(t.data<float>(), 3), -1);  // a short scan, before the bad values
}

TEST(FiniteValues, MaxAbsDifferenceFindsTheLargest) {
  const Tensor a = filled(kLarge, 1.f);
  Tensor b = filled(kLarge, 1.f);
  KUIPER_ASSERT_OK_AND_ASSIGN(double same, max_abs_difference(a, b));
  EXPECT_EQ(same, 0.0);
  b.data<float>()[17] = 1.25f;
  b.data<float>()[kLarge - 2] = 0.5f;  // the largest, near the end
  KUIPER_ASSERT_OK_AND_ASSIGN(double worst, max_abs_difference(a, b));
  EXPECT_EQ(worst, 0.5);
  EXPECT_FALSE(max_abs_difference(a, filled(kLarge - 1, 1.f)).ok());  // shapes differ
}

}  // namespace
}  // namespace kuiper
