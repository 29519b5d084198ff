// One decoder per ggml block type (ggml-common.h's block_* layouts), shared by gguf_blocks.cpp's
// table. A "coded" decoder writes one block as kuiper int8/int4 codes with their groups' scales
// (and mins); a "float" decoder writes a block's weights as fp32, exactly as ggml dequantizes
// them, for the types kuiper's weights cannot hold as they are. Each returns false when one of
// the block's fp16 constants is NaN or infinite.
#pragma once

#include <cstdint>

namespace kuiper::gguf_blocks {

// Where one block's coded weights go: its bytes of kuiper values (int8 codes, or nibbles packed
// as op/int4_weight.h packs them), and its groups' scales and mins.
struct BlockOut {
  uint8_t* values;
  float* scales;
  float* mins;
};

float half_at(const uint8_t* p);

// ggml-common.h's kvalues_iq4nl: the 16 int8 values IQ4_NL and IQ4_XS nibbles index.
const int8_t* iq4_nl_values();

// Packs n nibbles given in weight order the way kuiper stores int4.
void pack_nibbles(const uint8_t* nibbles, int n, uint8_t* packed);

// Blocks of 32 weights (gguf_blocks_32.cpp).
bool decode_q8_0(const uint8_t* block, const BlockOut& out);
bool decode_q4_0(const uint8_t* block, const BlockOut& out);
bool decode_q4_1(const uint8_t* block, const BlockOut& out);
bool decode_q5_0(const uint8_t* block, const BlockOut& out);
bool decode_iq4_nl(const uint8_t* block, const BlockOut& out);
bool decode_q5_1_floats(const uint8_t* block, float* out);

// Super-blocks of 256 weights (gguf_blocks_256.cpp).
bool decode_q2_k(const uint8_t* block, const BlockOut& out);
bool decode_q3_k(const uint8_t* block, const BlockOut& out);
bool decode_q4_k(const uint8_t* block, const BlockOut& out);
bool decode_q6_k(const uint8_t* block, const BlockOut& out);
bool decode_iq4_xs(const uint8_t* block, const BlockOut& out);
bool decode_q5_k_floats(const uint8_t* block, float* out);

}  // namespace kuiper::gguf_blocks
