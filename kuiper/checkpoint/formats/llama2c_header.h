// The header llama2.c's export.py writes for its versioned checkpoints (256 bytes): uint32 magic
// "ak42", int32 version, 7 int32 dims (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, max_seq_len), uint8 shared-classifier flag at byte 36; version 2 adds its int32
// group size at byte 37 (packed, as Python's struct writes it); zero padding. Shared by the v1
// and v2 readers and writers.
#pragma once

#include <cstdint>
#include <vector>

#include "kuiper/base/mapped_file.h"
#include "kuiper/model/llama_config.h"

namespace kuiper {

inline constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42" read as a little-endian uint32
inline constexpr size_t kLlama2cHeaderBytes = 256;

// The legacy 7-int header (llama2.c v0, and KuiperLLama's int8 files after it) stores an
// unshared classifier as a negative vocab size.
struct SignedVocab {
  int32_t size;  // 0 for INT32_MIN, which has no positive counterpart (validate() refuses 0)
  bool shared_classifier;
};
SignedVocab decode_signed_vocab(int32_t stored);

// True when `file` starts with the magic and `version`.
bool has_llama2c_header(const MappedFile& file, int32_t version);

// The header of a file of `version` holding a model of config `c` (group_size: version 2 only).
std::vector<uint8_t> make_llama2c_header(const LlamaConfig& c, int32_t version, int32_t group_size = 0);

// Whether a llama2.c file (`format`: "v1", "v2") can hold a model of config `c`: its header has
// no place for RoPE θ or scaling, biases, per-head norms, a head width of its own or a window.
Status check_llama2c_can_store(const LlamaConfig& c, const char* format);

}  // namespace kuiper
