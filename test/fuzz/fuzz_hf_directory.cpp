// A whole Hugging Face model directory: the input up to its first NUL byte is config.json (JSON
// cannot hold a raw NUL), the rest is model.safetensors.
#include <cstring>

#include "kuiper/checkpoint/formats/hf_safetensors.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t config_size = nul == nullptr ? size : static_cast<size_t>(nul - data);
  const size_t weights_start = nul == nullptr ? size : config_size + 1;
  kuiper::fuzz::write_scratch_file("config.json", data, config_size);
  kuiper::fuzz::write_scratch_file("model.safetensors", data + weights_start, size - weights_start);
  (void)kuiper::load_hf_checkpoint(kuiper::fuzz::scratch_dir());
  return 0;
}
