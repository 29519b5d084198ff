// The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*): any bytes must load or
// be refused with a Status; a tokenizer that loads is then used, every id decoded and text
// encoded. (The checkpoint side of GGUF is fuzz_checkpoint_gguf.)
#include "kuiper/base/mapped_file.h"
#include "kuiper/tokenizer/tokenizer_formats.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kuiper::fuzz::write_scratch_file("model.gguf", data, size);
  auto file = kuiper::MappedFile::open(path);
  if (!file.ok()) return 0;
  auto tokenizer = kuiper::load_gguf_tokenizer(*file);
  if (!tokenizer.ok()) return 0;
  const kuiper::Tokenizer& t = **tokenizer;
  for (int32_t id = 0, previous = -1; id < t.vocab_size() && id < 4096; previous = id++) (void)t.token_bytes(id, previous);
  (void)t.encode("Hello, world! <s> </s> <|im_start|> \xC3\xA9t\xC3\xA9 123", {.add_bos = true, .allow_special = true});
  return 0;
}
