#include "kuiper/checkpoint/formats/gguf_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kuiper/base/half.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/int8_weight.h"

namespace kuiper {
namespace {

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return fp16_to_float(bits);
}

// Where one block's weights go: its bytes of kuiper values, and its groups' scales and mins.
struct BlockOut {
  uint8_t* values;
  float* scales;
  float* mins;
};

// Packs n nibbles given in weight order the way kuiper stores int4.
void pack_nibbles(const uint8_t* nibbles, int n, uint8_t* packed) {
  for (int i = 0; i < n; i += 2) packed[i / 2] = static_cast<uint8_t>(nibbles[i] | (nibbles[i + 1] << 4));
}

// 32 weights as Q4_0/Q4_1 store them: weight j < 16 in the low nibble of qs[j], weight j + 16 in
// its high nibble.
void repack_half_split(const uint8_t* qs, uint8_t* packed) {
  uint8_t nibbles[32];
  for (int j = 0; j < 16; ++j) {
    nibbles[j] = qs[j] & 0x0F;
    nibbles[j + 16] = qs[j] >> 4;
  }
  pack_nibbles(nibbles, 32, packed);
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

// Q4_K: fp16 d, fp16 dmin, 12 bytes of eight 6-bit scales and mins, 128 bytes of nibbles. Scale
// and min j < 4 are the low 6 bits of bytes j and j + 4; for j ≥ 4 the low 4 bits come from
// byte j + 4 (scale: its low nibble, min: its high nibble) and the top 2 from the top bits of
// bytes j − 4 (scale) and j (min). Each 32 bytes of nibbles hold two sub-blocks: the even one
// in the low nibbles, the odd one in the high nibbles.
bool decode_q4_k(const uint8_t* block, const BlockOut& out) {
  const float d = half_at(block), dmin = half_at(block + 2);
  const uint8_t* packed_scales = block + 4;
  const uint8_t* qs = block + 16;
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    if (j < 4) {
      scale = packed_scales[j] & 63;
      min = packed_scales[j + 4] & 63;
    } else {
      scale = (packed_scales[j + 4] & 0x0F) | ((packed_scales[j - 4] >> 6) << 4);
      min = (packed_scales[j + 4] >> 4) | ((packed_scales[j] >> 6) << 4);
    }
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

// Q6_K: 128 bytes of low nibbles, 64 of 2-bit high parts, 16 int8 scales, fp16 d. In each half
// of 128 weights, weight 32s + l (s < 4, l < 32) takes its low 4 bits from the low (s < 2) or
// high (s ≥ 2) nibble of ql[32 (s mod 2) + l] and its top 2 bits from bits 2s, 2s + 1 of qh[l].
bool decode_q6_k(const uint8_t* block, const BlockOut& out) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = half_at(block + 208);
  auto* values = reinterpret_cast<int8_t*>(out.values);
  for (int half = 0; half < 2; ++half) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = ql[64 * half + 32 * (s % 2) + l];
        const int low = s < 2 ? (byte & 0x0F) : (byte >> 4);
        const int high = (qh[32 * half + l] >> (2 * s)) & 3;
        values[128 * half + 32 * s + l] = static_cast<int8_t>((low | (high << 4)) - 32);
      }
    }
  }
  for (int j = 0; j < 16; ++j) out.scales[j] = d * static_cast<float>(scales[j]);
  return std::isfinite(d);
}

struct BlockCodec {
  GgmlType type;
  DataType dtype;  // of the kuiper weight
  int group_size;
  bool with_min;
  int block_weights;
  size_t block_bytes;
  bool (*decode)(const uint8_t* block, const BlockOut& out);  // false: a scale is not finite
};

constexpr BlockCodec kCodecs[] = {
    {GgmlType::kQ8_0, DataType::kINT8, 32, false, 32, 34, decode_q8_0},
    {GgmlType::kQ4_0, DataType::kINT4, 32, false, 32, 18, decode_q4_0},
    {GgmlType::kQ4_1, DataType::kINT4, 32, true, 32, 20, decode_q4_1},
    {GgmlType::kQ4_K, DataType::kINT4, 32, true, 256, 144, decode_q4_k},
    {GgmlType::kQ6_K, DataType::kINT8, 16, false, 256, 210, decode_q6_k},
};

const BlockCodec* codec_of(uint32_t type) {
  for (const BlockCodec& c : kCodecs) {
    if (static_cast<uint32_t>(c.type) == type) return &c;
  }
  return nullptr;
}

}  // namespace

bool gguf_blocks_readable(uint32_t type) { return codec_of(type) != nullptr; }

StatusOr<op::Weight> decode_gguf_blocks(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols,
                                        const std::string& what) {
  const BlockCodec* codec = codec_of(type);
  if (codec == nullptr) return unsupported(what + " has type " + ggml_type_name(type) + ", which has no block decoder");
  if (cols % codec->block_weights != 0) {
    return invalid_format(what + ": rows of " + std::to_string(cols) + " weights are not whole " +
                          ggml_type_name(type) + " blocks of " + std::to_string(codec->block_weights));
  }
  const bool int4 = codec->dtype == DataType::kINT4;
  const int64_t blocks = rows * cols / codec->block_weights;
  const int64_t groups_per_block = codec->block_weights / codec->group_size;
  const int64_t value_bytes = int4 ? codec->block_weights / 2 : codec->block_weights;
  op::Weight w{Tensor(), Tensor(), codec->group_size, Tensor()};
  KUIPER_ASSIGN_OR_RETURN(w.values, Tensor::empty(codec->dtype, {rows, int4 ? cols / 2 : cols}, cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(w.scales, Tensor::empty(DataType::kFP32, {blocks * groups_per_block}, cpu_allocator()));
  if (codec->with_min) {
    KUIPER_ASSIGN_OR_RETURN(w.mins, Tensor::empty(DataType::kFP32, {blocks * groups_per_block}, cpu_allocator()));
  }
  auto* values = static_cast<uint8_t*>(w.values.raw_data());
  float* scales = w.scales.data<float>();
  float* mins = codec->with_min ? w.mins.data<float>() : nullptr;
  int64_t first_bad = blocks;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (blocks > 4096)
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockOut out{values + b * value_bytes, scales + b * groups_per_block,
                       mins ? mins + b * groups_per_block : nullptr};
    if (!codec->decode(data + b * codec->block_bytes, out)) first_bad = std::min(first_bad, b);
  }
  if (first_bad < blocks) {
    return invalid_format(what + ": " + ggml_type_name(type) + " block " + std::to_string(first_bad) + " of " +
                          std::to_string(blocks) + " has a NaN or infinite scale");
  }
  KUIPER_RETURN_IF_ERROR(int4 ? op::check_int4_weight(w) : op::check_int8_weight(w));
  return w;
}

}  // namespace kuiper
