// Arbitrary bytes through one real tokenizer (KUIPER_FUZZ_TOKENIZER, a path set per harness by
// CMake): encoded as text (special tokens on and off), and decoded as int32 ids, which may be
// anything: out of range, negative.
#include <cstring>
#include <string_view>
#include <vector>

#include "fuzz_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kuiper::Tokenizer& t = kuiper::fuzz::tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool special : {false, true}) {
    auto ids = t.encode(text, {.add_bos = true, .allow_special = special});
    if (ids.ok()) (void)t.decode(*ids);
  }
  std::vector<int32_t> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  (void)t.decode(ids);
  return 0;
}
