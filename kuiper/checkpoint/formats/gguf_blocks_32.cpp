// ggml's blocks of 32 weights, each with one fp16 scale (and Q4_1/Q5_1 an fp16 minimum). In
// every one of them weight j < 16 is in the low nibble of qs[j] and weight j + 16 in its high
// nibble; Q5_0/Q5_1 add weight j's fifth bit as bit j of the 32-bit qh.
#include <cmath>
#include <cstring>

#include "kuiper/base/half.h"
#include "kuiper/checkpoint/formats/gguf_block_decoders.h"

namespace kuiper::gguf_blocks {
namespace {

constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 32 nibbles of a half-split block, in weight order.
void half_split_nibbles(const uint8_t* qs, uint8_t* nibbles) {
  for (int j = 0; j < 16; ++j) {
    nibbles[j] = qs[j] & 0x0F;
    nibbles[j + 16] = qs[j] >> 4;
  }
}

// The 32 five-bit codes (0..31) of a Q5_0/Q5_1 block from its qh and qs.
void five_bit_codes(const uint8_t* qh_bytes, const uint8_t* qs, int* codes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  uint8_t nibbles[32];
  half_split_nibbles(qs, nibbles);
  for (int j = 0; j < 32; ++j) codes[j] = nibbles[j] | (((qh >> j) & 1) << 4);
}

void repack_half_split(const uint8_t* qs, uint8_t* packed) {
  uint8_t nibbles[32];
  half_split_nibbles(qs, nibbles);
  pack_nibbles(nibbles, 32, packed);
}

}  // namespace

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return fp16_to_float(bits);
}

void pack_nibbles(const uint8_t* nibbles, int n, uint8_t* packed) {
  for (int i = 0; i < n; i += 2) packed[i / 2] = static_cast<uint8_t>(nibbles[i] | (nibbles[i + 1] << 4));
}

bool decode_q8_0(const uint8_t* block, const BlockOut& out) {
  out.scales[0] = half_at(block);
  std::memcpy(out.values, block + 2, 32);
  return std::isfinite(out.scales[0]);
}

bool decode_q4_0(const uint8_t* block, const BlockOut& out) {
  out.scales[0] = half_at(block);
  repack_half_split(block + 2, out.values);
  return std::isfinite(out.scales[0]);
}

bool decode_q4_1(const uint8_t* block, const BlockOut& out) {
  out.scales[0] = half_at(block);
  out.mins[0] = half_at(block + 2);
  repack_half_split(block + 4, out.values);
  return std::isfinite(out.scales[0]) && std::isfinite(out.mins[0]);
}

// Q5_0: fp16 d, 4 bytes qh, 16 bytes qs; d·(q − 16), as int8 code q − 16 with scale d.
bool decode_q5_0(const uint8_t* block, const BlockOut& out) {
  out.scales[0] = half_at(block);
  int codes[32];
  five_bit_codes(block + 2, block + 6, codes);
  for (int j = 0; j < 32; ++j) out.values[j] = static_cast<uint8_t>(static_cast<int8_t>(codes[j] - 16));
  return std::isfinite(out.scales[0]);
}

// IQ4_NL: fp16 d, 16 bytes qs; d·kvalues[q], as int8 code kvalues[q] with scale d.
bool decode_iq4_nl(const uint8_t* block, const BlockOut& out) {
  out.scales[0] = half_at(block);
  uint8_t nibbles[32];
  half_split_nibbles(block + 2, nibbles);
  for (int j = 0; j < 32; ++j) out.values[j] = static_cast<uint8_t>(kIq4NlValues[nibbles[j]]);
  return std::isfinite(out.scales[0]);
}

// Q5_1: fp16 d, fp16 m, 4 bytes qh, 16 bytes qs; d·q + m.
bool decode_q5_1_floats(const uint8_t* block, float* out) {
  const float d = half_at(block), m = half_at(block + 2);
  int codes[32];
  five_bit_codes(block + 4, block + 8, codes);
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(codes[j]) * d + m;
  return std::isfinite(d) && std::isfinite(m);
}

const int8_t* iq4_nl_values() { return kIq4NlValues; }

}  // namespace kuiper::gguf_blocks
