// fp16/bf16 <-> fp32 conversions (kuiper/base/half.h), checked over every 16-bit pattern.
// Two independent references: the compiler's _Float16 (IEEE conversions, F16C on x86) and a
// round-to-nearest-even formula in double precision written here from the formats' definitions.
#include "kuiper/base/half.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace kuiper {
namespace {

struct Format {
  const char* name;
  int digits;           // significand bits including the implicit one
  int min_exponent;     // frexp exponent of the smallest normal (value = m * 2^e, m in [0.5, 1))
  int exponent_bias;
  double max_finite;
  float (*decode)(uint16_t);
  uint16_t (*encode)(float);
};

const Format kFp16{"fp16", 11, -13, 15, 65504.0, fp16_to_float, float_to_fp16};
const Format kBf16{"bf16", 8, -125, 127, std::ldexp(255.0, 120), bf16_to_float, float_to_bf16};

// The value of bit pattern `h` from the definition: sign, exponent field, fraction field.
double decode_reference(const Format& f, uint16_t h) {
  const int fraction_bits = f.digits - 1;
  const int exponent_field = (h & 0x7fff) >> fraction_bits;
  const int max_field = (1 << (15 - fraction_bits)) - 1;
  const uint32_t fraction = h & ((1u << fraction_bits) - 1);
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent_field == max_field) return fraction == 0 ? sign * INFINITY : NAN;
  if (exponent_field == 0) return sign * std::ldexp(fraction, 1 - f.exponent_bias - fraction_bits);
  return sign * std::ldexp((1u << fraction_bits) | fraction, exponent_field - f.exponent_bias -
                                                               fraction_bits);
}

// x rounded to the format, ties to even: keep `digits` bits, but never a quantum finer than
// that of the smallest normal (subnormals); beyond the largest finite value the result is inf.
double round_reference(const Format& f, double x) {
  if (x == 0 || std::isinf(x)) return x;
  int e;
  std::frexp(x, &e);
  const int quantum_exponent = std::max(e, f.min_exponent) - f.digits;
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(x, -quantum_exponent)),
                                    quantum_exponent);
  if (std::abs(rounded) > f.max_finite) return std::copysign(INFINITY, x);
  return rounded == 0 ? std::copysign(0.0, x) : rounded;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Floats around every representable value of the format: the value itself, the midpoint to
// its upper neighbour (a tie) and the floats just either side of both, in both signs.
std::vector<float> rounding_probes(const Format& f) {
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7fff; ++h) {
    const double v = decode_reference(f, static_cast<uint16_t>(h));
    const double next = decode_reference(f, static_cast<uint16_t>(h + 1));
    if (!std::isfinite(v)) continue;
    const double mid = std::isinf(next) ? f.max_finite + (f.max_finite - decode_reference(
                                              f, static_cast<uint16_t>(h - 1))) / 2
                                        : (v + next) / 2;
    for (double x : {v, mid}) {
      const float xf = static_cast<float>(x);
      EXPECT_EQ(static_cast<double>(xf), x) << "probe not exact in float";
      for (float p : {xf, std::nextafter(xf, -INFINITY), std::nextafter(xf, INFINITY)}) {
        probes.push_back(p);
        probes.push_back(-p);
      }
    }
  }
  for (float special : {0.f, INFINITY, FLT_MAX, FLT_MIN, FLT_TRUE_MIN}) {
    probes.push_back(special);
    probes.push_back(-special);
  }
  // A spread over all other floats too (stride prime to every power of two).
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) {
    const float x = bits_to_float(static_cast<uint32_t>(b));
    if (!std::isnan(x)) probes.push_back(x);
  }
  return probes;
}

_Float16 half_from_bits(uint16_t h) { _Float16 x; std::memcpy(&x, &h, 2); return x; }
uint16_t half_bits(_Float16 x) { uint16_t h; std::memcpy(&h, &x, 2); return h; }

TEST(Half, DecodeEveryPatternMatchesDefinition) {
  for (const Format* f : {&kFp16, &kBf16}) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
      const double got = f->decode(static_cast<uint16_t>(h));
      const double want = decode_reference(*f, static_cast<uint16_t>(h));
      ASSERT_TRUE(same_value(got, want)) << f->name << " 0x" << std::hex << h << ": " << got
                                         << " vs " << want;
      if (std::isnan(got)) {
        EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << f->name << " NaN sign 0x" << std::hex << h;
      }
    }
  }
}

TEST(Half, Fp16DecodeMatchesCompilerFloat16) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = fp16_to_float(static_cast<uint16_t>(h));
    const float want = static_cast<float>(half_from_bits(static_cast<uint16_t>(h)));
    ASSERT_TRUE(same_value(got, want)) << "0x" << std::hex << h;
  }
}

TEST(Half, EncodeRoundsToNearestEven) {
  for (const Format* f : {&kFp16, &kBf16}) {
    for (float x : rounding_probes(*f)) {
      const uint16_t h = f->encode(x);
      const double want = round_reference(*f, x);
      ASSERT_TRUE(same_value(f->decode(h), want))
          << f->name << " of " << x << " (0x" << std::hex << float_to_bits(x) << ") gave 0x" << h
          << ", want " << want;
    }
  }
}

TEST(Half, Fp16EncodeMatchesCompilerFloat16Bits) {
  for (float x : rounding_probes(kFp16)) {
    ASSERT_EQ(float_to_fp16(x), half_bits(static_cast<_Float16>(x)))
        << x << " (0x" << std::hex << float_to_bits(x) << ")";
  }
}

TEST(Half, EncodeEveryPatternRoundTrips) {
  for (const Format* f : {&kFp16, &kBf16}) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
      const float x = f->decode(static_cast<uint16_t>(h));
      if (std::isnan(x)) continue;
      ASSERT_EQ(f->encode(x), h) << f->name << " 0x" << std::hex << h;
    }
  }
}

TEST(Half, NaNStaysQuietNaNWithItsSign) {
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7f80ffffu, 0x7fffffffu,
                           0x7f800100u};
  for (uint32_t bits : nans) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = bits_to_float(bits | sign);
      for (const Format* f : {&kFp16, &kBf16}) {
        const uint16_t h = f->encode(x);
        const uint16_t quiet_bit = static_cast<uint16_t>(1u << (f->digits - 2));
        EXPECT_TRUE(std::isnan(f->decode(h))) << f->name << " 0x" << std::hex << (bits | sign);
        EXPECT_NE(h & quiet_bit, 0) << f->name << " NaN must be quiet: 0x" << std::hex << h;
        EXPECT_EQ((h & 0x8000) != 0, sign != 0) << f->name;
      }
    }
  }
}

TEST(Half, OverflowAndUnderflowEdges) {
  // Exact expectations from the formats' definitions, as a readable spot check of the above.
  EXPECT_EQ(float_to_fp16(65504.f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.996f), 0x7bff);  // just below the tie with 65536
  EXPECT_EQ(float_to_fp16(65520.f), 0x7c00);     // the tie rounds to even, which is inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.f, -25)), 0x0000);  // tie with 0 rounds to even
  EXPECT_EQ(float_to_fp16(std::nextafter(std::ldexp(1.f, -25), 1.f)), 0x0001);
  EXPECT_EQ(float_to_fp16(-std::ldexp(3.f, -25)), 0x8002);   // 1.5 quanta: tie -> 2
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7f80);  // rounds past bf16's largest finite value
  EXPECT_EQ(float_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3f80);  // tie -> even (1.0)
  EXPECT_EQ(float_to_bf16(1.f + std::ldexp(3.f, -8)), 0x3f82);  // tie -> even (1 + 2^-6)
  EXPECT_EQ(float_to_bf16(FLT_TRUE_MIN), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.f), 0x8000);
}

}  // namespace
}  // namespace kuiper
