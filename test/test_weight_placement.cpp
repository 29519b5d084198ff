// Group constants change dtype as weights move (model/weight_placement.h): fp32 to fp16 rounds to
// nearest, as NumPy's float16 does (the expected bits below are numpy.float16 of each value),
// fp16 comes back to the host as fp32 exactly, and a constant fp16 cannot hold is refused, naming
// its group, instead of becoming infinity.
#include <cstdint>
#include <cstring>

#include "kuiper/base/half.h"
#include "kuiper/model/weight_placement.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

Tensor fp32_vector(std::initializer_list<float> values) {
  Tensor t = Tensor::zeros_cpu(DataType::kFP32, {static_cast<int64_t>(values.size())}).value();
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

TEST(GroupConstantsAs, Fp16RoundsToNearestAsNumPyDoes) {
  const Tensor source = fp32_vector({0.1f, 0.001f, -0.5f, 3e-8f, 1e-5f, 65504.f, 65519.f});
  const uint16_t numpy_bits[] = {0x2e66, 0x1419, 0xb800, 0x0001, 0x00a8, 0x7bff, 0x7bff};
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor fp16, group_constants_as(source, DataType::kFP16, "scales"));
  ASSERT_EQ(fp16.dtype(), DataType::kFP16);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(fp16.data<uint16_t>()[i], numpy_bits[i]) << "value " << i;
}

TEST(GroupConstantsAs, RefusesWhatFp16CannotHold) {
  for (const float beyond : {65520.f, -70000.f}) {
    const auto fp16 = group_constants_as(fp32_vector({0.5f, 0.25f, beyond, 1e9f}), DataType::kFP16, "wq scales");
    ASSERT_FALSE(fp16.ok());
    EXPECT_EQ(fp16.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(fp16.status().message().find("wq scales: "), std::string::npos) << fp16.status().message();
    EXPECT_NE(fp16.status().message().find("at group 2 is beyond fp16's range"), std::string::npos)
        << fp16.status().message();
  }
}

TEST(WeightOn, TheHostGetsFp16ConstantsBackInFp32Exactly) {
  const uint16_t bits[] = {0x2e66, 0x1419, 0xb800, 0x0001};
  op::Weight w;
  w.values = Tensor::zeros_cpu(DataType::kINT8, {2, 64}).value();
  w.group_size = 32;
  w.scales = Tensor::zeros_cpu(DataType::kFP16, {4}).value();
  std::memcpy(w.scales.raw_data(), bits, sizeof(bits));
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight host, weight_on_host(w));
  ASSERT_EQ(host.scales.dtype(), DataType::kFP32);
  const double numpy_values[] = {0.0999755859375, 0.0010004043579101562, -0.5, 5.960464477539063e-08};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(double{host.scales.data<float>()[i]}, numpy_values[i]) << "group " << i;
  EXPECT_EQ(host.values.raw_data(), w.values.raw_data());  // values already on the host are not copied
}

TEST(WeightOn, AHostWeightStaysAsItIs) {
  std::mt19937 rng(3);
  const op::Weight w = test::random_int4_weight(4, 64, 32, true, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight host, weight_on_host(w));
  EXPECT_EQ(host.values.raw_data(), w.values.raw_data());
  EXPECT_EQ(host.scales.raw_data(), w.scales.raw_data());
  EXPECT_EQ(host.mins.raw_data(), w.mins.raw_data());
}

}  // namespace
}  // namespace kuiper
