// A Hugging Face config.json read into a LlamaConfig.
#include <string>

#include "kuiper/checkpoint/formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kuiper::parse_hf_llama_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
  return 0;
}
