#include "kuiper/checkpoint/formats/gguf_blocks.h"

#include <algorithm>
#include <cmath>

#include "kuiper/checkpoint/formats/gguf_block_decoders.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/model/dequantize.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/int8_weight.h"

namespace kuiper {
namespace {

using gguf_blocks::BlockOut;

struct BlockCodec {
  GgmlType type;
  DataType dtype;  // of the kuiper weight
  int group_size;
  bool with_min;
  int block_weights;
  size_t block_bytes;
  // One of the two, returning false where a block constant is not finite: the block as kuiper
  // codes, or (requantized types) as fp32 weights.
  bool (*decode)(const uint8_t* block, const BlockOut& out);
  bool (*decode_floats)(const uint8_t* block, float* out);
};

constexpr BlockCodec kCodecs[] = {
    {GgmlType::kQ8_0, DataType::kINT8, 32, false, 32, 34, gguf_blocks::decode_q8_0, nullptr},
    {GgmlType::kQ5_0, DataType::kINT8, 32, false, 32, 22, gguf_blocks::decode_q5_0, nullptr},
    {GgmlType::kIQ4_NL, DataType::kINT8, 32, false, 32, 18, gguf_blocks::decode_iq4_nl, nullptr},
    {GgmlType::kQ4_0, DataType::kINT4, 32, false, 32, 18, gguf_blocks::decode_q4_0, nullptr},
    {GgmlType::kQ4_1, DataType::kINT4, 32, true, 32, 20, gguf_blocks::decode_q4_1, nullptr},
    {GgmlType::kQ5_1, DataType::kINT8, 32, false, 32, 24, nullptr, gguf_blocks::decode_q5_1_floats},
    {GgmlType::kQ2_K, DataType::kINT4, 16, true, 256, 84, gguf_blocks::decode_q2_k, nullptr},
    {GgmlType::kQ3_K, DataType::kINT8, 16, false, 256, 110, gguf_blocks::decode_q3_k, nullptr},
    {GgmlType::kQ4_K, DataType::kINT4, 32, true, 256, 144, gguf_blocks::decode_q4_k, nullptr},
    {GgmlType::kQ5_K, DataType::kINT8, 32, false, 256, 176, nullptr, gguf_blocks::decode_q5_k_floats},
    {GgmlType::kQ6_K, DataType::kINT8, 16, false, 256, 210, gguf_blocks::decode_q6_k, nullptr},
    {GgmlType::kIQ4_XS, DataType::kINT8, 32, false, 256, 136, gguf_blocks::decode_iq4_xs, nullptr},
};

const BlockCodec* codec_of(uint32_t type) {
  for (const BlockCodec& c : kCodecs) {
    if (static_cast<uint32_t>(c.type) == type) return &c;
  }
  return nullptr;
}

// Runs `decode_block(b)` over every block, in parallel for large matrices; the first block whose
// constants are not finite, or `blocks` when none.
template <typename DecodeBlock>
int64_t first_bad_block(int64_t blocks, DecodeBlock decode_block) {
  int64_t first_bad = blocks;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (blocks > 4096)
  for (int64_t b = 0; b < blocks; ++b) {
    if (!decode_block(b)) first_bad = std::min(first_bad, b);
  }
  return first_bad;
}

Status bad_block(const std::string& what, uint32_t type, int64_t block, int64_t blocks) {
  return invalid_format(what + ": " + ggml_type_name(type) + " block " + std::to_string(block) + " of " +
                        std::to_string(blocks) + " has a NaN or infinite scale");
}

// The blocks' kuiper codes and group constants, as stored.
StatusOr<op::Weight> coded_weight(const BlockCodec& codec, const uint8_t* data, int64_t rows, int64_t cols,
                                  const std::string& what) {
  const bool int4 = codec.dtype == DataType::kINT4;
  const int64_t blocks = rows * cols / codec.block_weights;
  const int64_t groups_per_block = codec.block_weights / codec.group_size;
  const int64_t value_bytes = int4 ? codec.block_weights / 2 : codec.block_weights;
  op::Weight w{Tensor(), Tensor(), codec.group_size, Tensor()};
  KUIPER_ASSIGN_OR_RETURN(w.values, Tensor::empty(codec.dtype, {rows, int4 ? cols / 2 : cols}, cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(w.scales, Tensor::empty(DataType::kFP32, {blocks * groups_per_block}, cpu_allocator()));
  if (codec.with_min) {
    KUIPER_ASSIGN_OR_RETURN(w.mins, Tensor::empty(DataType::kFP32, {blocks * groups_per_block}, cpu_allocator()));
  }
  auto* values = static_cast<uint8_t*>(w.values.raw_data());
  float* scales = w.scales.data<float>();
  float* mins = codec.with_min ? w.mins.data<float>() : nullptr;
  const int64_t bad = first_bad_block(blocks, [&](int64_t b) {
    const BlockOut out{values + b * value_bytes, scales + b * groups_per_block,
                       mins ? mins + b * groups_per_block : nullptr};
    return codec.decode(data + b * codec.block_bytes, out);
  });
  if (bad < blocks) return bad_block(what, static_cast<uint32_t>(codec.type), bad, blocks);
  KUIPER_RETURN_IF_ERROR(int4 ? op::check_int4_weight(w) : op::check_int8_weight(w));
  return w;
}

// The blocks dequantized as ggml does, then quantized to symmetric int8 in the codec's groups.
StatusOr<op::Weight> requantized_weight(const BlockCodec& codec, const uint8_t* data, int64_t rows, int64_t cols,
                                        const std::string& what, RequantizationError* error) {
  const int64_t blocks = rows * cols / codec.block_weights;
  KUIPER_ASSIGN_OR_RETURN(Tensor floats, Tensor::empty(DataType::kFP32, {rows, cols}, cpu_allocator()));
  float* out = floats.data<float>();
  const int64_t bad = first_bad_block(blocks, [&](int64_t b) {
    return codec.decode_floats(data + b * codec.block_bytes, out + b * codec.block_weights);
  });
  if (bad < blocks) return bad_block(what, static_cast<uint32_t>(codec.type), bad, blocks);
  KUIPER_ASSIGN_OR_RETURN(op::Weight w, quantize_int8(floats, codec.group_size));
  if (error != nullptr) {
    KUIPER_ASSIGN_OR_RETURN(error->max_error, max_quantization_error(floats, w));
    error->max_weight = 0;
    for (int64_t i = 0; i < floats.numel(); ++i) error->max_weight = std::max(error->max_weight, double{std::fabs(out[i])});
  }
  return w;
}

}  // namespace

bool gguf_blocks_readable(uint32_t type) { return codec_of(type) != nullptr; }

bool gguf_blocks_requantized(uint32_t type) {
  const BlockCodec* codec = codec_of(type);
  return codec != nullptr && codec->decode_floats != nullptr;
}

StatusOr<op::Weight> decode_gguf_blocks(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols,
                                        const std::string& what, RequantizationError* error) {
  const BlockCodec* codec = codec_of(type);
  if (codec == nullptr) return unsupported(what + " has type " + ggml_type_name(type) + ", which has no block decoder");
  if (cols % codec->block_weights != 0) {
    return invalid_format(what + ": rows of " + std::to_string(cols) + " weights are not whole " +
                          ggml_type_name(type) + " blocks of " + std::to_string(codec->block_weights));
  }
  return codec->decode_floats != nullptr ? requantized_weight(*codec, data, rows, cols, what, error)
                                         : coded_weight(*codec, data, rows, cols, what);
}

}  // namespace kuiper
