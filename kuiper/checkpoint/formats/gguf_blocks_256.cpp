// ggml's super-blocks of 256 weights (QK_K): one or two fp16 constants and 8 or 16 sub-blocks
// with small integer scales. In Q2_K, Q3_K and Q6_K each half of 128 weights keeps its low bits
// in 32 bytes (Q6_K: 64), the 2-bit (Q6_K: 4-bit) field at bits 2s of byte l holding weight
// 32s + l of the half; Q4_K and Q5_K keep sub-block pairs in the low and high nibbles of 32 bytes.
#include <cmath>
#include <cstring>

#include "kuiper/checkpoint/formats/gguf_block_decoders.h"

namespace kuiper::gguf_blocks {
namespace {

// Q4_K/Q5_K's 12 bytes of eight 6-bit scales and mins (ggml's get_scale_min_k4): scale and min
// j < 4 are the low 6 bits of bytes j and j + 4; for j ≥ 4 the low 4 bits come from byte j + 4
// (scale: its low nibble, min: its high nibble) and the top 2 from the top bits of bytes j − 4
// (scale) and j (min).
void k4_scale_min(const uint8_t* packed, int j, int& scale, int& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// The 2-bit field of weight i (of 256) in Q2_K/Q3_K's 64 bytes qs.
int two_bits(const uint8_t* qs, int i) {
  const int half = i / 128, s = (i % 128) / 32, l = i % 32;
  return (qs[32 * half + l] >> (2 * s)) & 3;
}

}  // namespace

// Q2_K: 16 bytes of 4-bit scale (low) and min (high) per sub-block of 16, 64 bytes qs, fp16 d,
// fp16 dmin; d·sc·q − dmin·m, as int4 with minimum: scale d·sc, min −dmin·m, nibble q.
bool decode_q2_k(const uint8_t* block, const BlockOut& out) {
  const uint8_t* scales = block;
  const uint8_t* qs = block + 16;
  const float d = half_at(block + 80), dmin = half_at(block + 82);
  for (int j = 0; j < 16; ++j) {
    out.scales[j] = d * static_cast<float>(scales[j] & 0x0F);
    out.mins[j] = -(dmin * static_cast<float>(scales[j] >> 4));
  }
  uint8_t nibbles[256];
  for (int i = 0; i < 256; ++i) nibbles[i] = static_cast<uint8_t>(two_bits(qs, i));
  pack_nibbles(nibbles, 256, out.values);
  return std::isfinite(d) && std::isfinite(dmin);
}

// Q3_K: 32 bytes hmask, 64 bytes qs, 12 bytes of sixteen 6-bit scales, fp16 d; d·(sc − 32)·q with
// q = the 2-bit field − 4 where weight i's hmask bit is clear (bit 4·half + s of byte l), in
// [−4, 3]: int8 code q, scale d·(sc − 32). Scale j's low 4 bits are the low (j < 8) or high
// nibble of byte j mod 8, its top 2 bits bits 2·(j / 4) of byte 8 + j mod 4.
bool decode_q3_k(const uint8_t* block, const BlockOut& out) {
  const uint8_t* hmask = block;
  const uint8_t* qs = block + 32;
  const uint8_t* scales = block + 96;
  const float d = half_at(block + 108);
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? scales[j] & 0x0F : scales[j - 8] >> 4;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    out.scales[j] = d * static_cast<float>((low | (high << 4)) - 32);
  }
  for (int i = 0; i < 256; ++i) {
    const int half = i / 128, s = (i % 128) / 32, l = i % 32;
    const bool high_bit = (hmask[l] >> (4 * half + s)) & 1;
    out.values[i] = static_cast<uint8_t>(static_cast<int8_t>(two_bits(qs, i) - (high_bit ? 0 : 4)));
  }
  return std::isfinite(d);
}

// Q4_K: fp16 d, fp16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles; d·sc·q − dmin·m,
// as int4 with minimum: scale d·sc, min −dmin·m. Each 32 bytes of nibbles hold two sub-blocks:
// the even one in the low nibbles, the odd one in the high nibbles.
bool decode_q4_k(const uint8_t* block, const BlockOut& out) {
  const float d = half_at(block), dmin = half_at(block + 2);
  const uint8_t* qs = block + 16;
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    k4_scale_min(block + 4, j, scale, min);
    out.scales[j] = d * static_cast<float>(scale);
    out.mins[j] = -(dmin * static_cast<float>(min));
  }
  for (int pair = 0; pair < 4; ++pair) {
    uint8_t low[32], high[32];
    for (int l = 0; l < 32; ++l) {
      low[l] = qs[32 * pair + l] & 0x0F;
      high[l] = qs[32 * pair + l] >> 4;
    }
    pack_nibbles(low, 32, out.values + (2 * pair) * 16);
    pack_nibbles(high, 32, out.values + (2 * pair + 1) * 16);
  }
  return std::isfinite(d) && std::isfinite(dmin);
}

// Q5_K: Q4_K's fields with 32 bytes qh between the scales and the nibbles; weight l of sub-block
// j takes its fifth bit from bit j of qh[l]. d·sc·q − dmin·m, q in [0, 31].
bool decode_q5_k_floats(const uint8_t* block, float* out) {
  const float d = half_at(block), dmin = half_at(block + 2);
  const uint8_t* qh = block + 16;
  const uint8_t* qs = block + 48;
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    k4_scale_min(block + 4, j, scale, min);
    const float step = d * static_cast<float>(scale), offset = dmin * static_cast<float>(min);
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[32 * (j / 2) + l];
      const int q = (j % 2 == 0 ? byte & 0x0F : byte >> 4) | (((qh[l] >> j) & 1) << 4);
      out[32 * j + l] = step * static_cast<float>(q) - offset;
    }
  }
  return std::isfinite(d) && std::isfinite(dmin);
}

// Q6_K: 128 bytes of low nibbles, 64 of 2-bit high parts, 16 int8 scales, fp16 d;
// d·sc·(q − 32), as int8 code q − 32, scale d·sc. In each half of 128 weights, weight 32s + l
// takes its low 4 bits from the low (s < 2) or high (s ≥ 2) nibble of ql[32 (s mod 2) + l].
bool decode_q6_k(const uint8_t* block, const BlockOut& out) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = half_at(block + 208);
  for (int i = 0; i < 256; ++i) {
    const int half = i / 128, s = (i % 128) / 32, l = i % 32;
    const uint8_t byte = ql[64 * half + 32 * (s % 2) + l];
    const int low = s < 2 ? (byte & 0x0F) : (byte >> 4);
    out.values[i] = static_cast<uint8_t>(static_cast<int8_t>((low | (two_bits(qh, i) << 4)) - 32));
  }
  for (int j = 0; j < 16; ++j) out.scales[j] = d * static_cast<float>(scales[j]);
  return std::isfinite(d);
}

// IQ4_XS: fp16 d, 16-bit scales_h, 4 bytes scales_l, 128 bytes of nibbles; sub-block j of 32 has
// the 6-bit ls = nibble j of scales_l (low first) | bits 2j, 2j + 1 of scales_h << 4, and
// weight d·(ls − 32)·kvalues[q]: int8 code kvalues[q], scale d·(ls − 32). Nibbles as IQ4_NL's,
// 16 bytes a sub-block.
bool decode_iq4_xs(const uint8_t* block, const BlockOut& out) {
  const float d = half_at(block);
  uint16_t scales_h;
  std::memcpy(&scales_h, block + 2, sizeof(scales_h));
  const uint8_t* scales_l = block + 4;
  const uint8_t* qs = block + 8;
  const int8_t* values = iq4_nl_values();
  for (int j = 0; j < 8; ++j) {
    const int ls = ((scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | (((scales_h >> (2 * j)) & 3) << 4);
    out.scales[j] = d * static_cast<float>(ls - 32);
    for (int l = 0; l < 16; ++l) {
      out.values[32 * j + l] = static_cast<uint8_t>(values[qs[16 * j + l] & 0x0F]);
      out.values[32 * j + l + 16] = static_cast<uint8_t>(values[qs[16 * j + l] >> 4]);
    }
  }
  return std::isfinite(d);
}

}  // namespace kuiper::gguf_blocks
