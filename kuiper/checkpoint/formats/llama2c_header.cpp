#include "kuiper/checkpoint/formats/llama2c_header.h"

#include <cstring>
#include <limits>

namespace kuiper {

SignedVocab decode_signed_vocab(int32_t stored) {
  if (stored == std::numeric_limits<int32_t>::min()) return {0, false};  // -INT32_MIN overflows
  return {stored < 0 ? -stored : stored, stored > 0};
}

bool has_llama2c_header(const MappedFile& file, int32_t version) {
  if (file.size() < 8) return false;
  uint32_t magic;
  int32_t stored_version;
  std::memcpy(&magic, file.data(), 4);
  std::memcpy(&stored_version, file.data() + 4, 4);
  return magic == kLlama2cMagic && stored_version == version;
}

std::vector<uint8_t> make_llama2c_header(const LlamaConfig& c, int32_t version, int32_t group_size) {
  std::vector<uint8_t> header(kLlama2cHeaderBytes, 0);
  const int32_t fields[] = {version, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                            c.vocab_size, c.max_seq_len};
  std::memcpy(header.data(), &kLlama2cMagic, 4);
  std::memcpy(header.data() + 4, fields, sizeof(fields));
  header[36] = c.shared_classifier ? 1 : 0;
  if (version == 2) std::memcpy(header.data() + 37, &group_size, 4);
  return header;
}

Status check_llama2c_can_store(const LlamaConfig& c, const char* format) {
  const std::string file = std::string("llama2.c ") + format + " files";
  if (c.rope_scaling.enabled || c.rope_theta != 10000.f) {
    return unsupported(file + " cannot record rope theta or scaling; this model needs them");
  }
  if (c.has_biases_or_head_norms() || c.head_size != 0 || c.sliding_window != 0) {
    return unsupported(file + " cannot record projection biases, per-head norms, a head width or a "
                       "sliding window; this model needs them (use the kuiper format)");
  }
  return ok_status();
}

}  // namespace kuiper
