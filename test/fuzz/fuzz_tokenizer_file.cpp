// One tokenizer file format (KUIPER_FUZZ_LOADER, a loader of tokenizer_formats.h, set per
// harness by CMake). A file that loads is then used: every id decoded, and text encoded.
#include "kuiper/tokenizer/tokenizer_formats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view content(reinterpret_cast<const char*>(data), size);
  auto tokenizer = kuiper::KUIPER_FUZZ_LOADER(content, "fuzzed");
  if (!tokenizer.ok()) return 0;
  const kuiper::Tokenizer& t = **tokenizer;
  // Decoding walks every piece the file defined; bounded so that a big vocabulary stays fast.
  for (int32_t id = 0, previous = -1; id < t.vocab_size() && id < 4096; previous = id++) (void)t.token_bytes(id, previous);
  (void)t.encode("Hello, world! <s> </s> <|eot_id|> \xC3\xA9t\xC3\xA9 123", {.add_bos = true, .allow_special = true});
  return 0;
}
