// Scalar fp16/bf16 <-> fp32 conversions for host code (loading, tests, CPU kernels).
// Bit-exact with IEEE round-to-nearest-even, so a weight converted here and on the GPU agree.
#pragma once

#include <cstdint>
#include <cstring>

namespace kuiper {

inline float bits_to_float(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf/NaN
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // Subnormal: renormalise.
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_to_float(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13));
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t b = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;             // NaN
  if (abs < 0x38800000u) {                                   // result is subnormal or zero
    if (abs < 0x33000000u) return sign;                      // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);    // 14..24
    const uint32_t rounded = (mant >> shift) + (((mant >> (shift - 1)) & 1u) &
                             (((mant & ((1u << (shift - 1)) - 1)) != 0) | ((mant >> shift) & 1u)));
    return sign | static_cast<uint16_t>(rounded);
  }
  uint32_t v = abs - 0x38000000u;                            // rebias exponent 127 -> 15
  v += 0xfffu + ((v >> 13) & 1u);                            // round to nearest even
  if (v >= 0x0f800000u) return sign | 0x7c00u;              // overflowed into fp16's inf exponent
  return sign | static_cast<uint16_t>(v >> 13);
}

}  // namespace kuiper
