#include "kuiper/checkpoint/formats/llama2c_header.h"

#include <cstring>

namespace kuiper {

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

}  // namespace kuiper
