// Text <-> token ids. One interface for every tokenizer kuiper reads (SentencePiece .model,
// llama2.c tokenizer.bin, LLaMA 3 tiktoken .model, HF tokenizer.json); load_tokenizer() picks
// the implementation from the file. Depends on base only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

struct EncodeOptions {
  bool add_bos = true;         // prepend the beginning-of-sequence token
  bool allow_special = false;  // turn special-token strings in the text ("<|eot_id|>") into ids
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual StatusOr<std::vector<int32_t>> encode(std::string_view text,
                                                const EncodeOptions& options = {}) const = 0;
  // The bytes token `id` stands for when it follows `previous` (-1 at the start). Bytes, not
  // text: a UTF-8 character may be split across tokens; StreamDecoder reassembles them.
  virtual std::string token_bytes(int32_t id, int32_t previous) const = 0;
  // Whole-sequence decode; equals concatenating token_bytes over the sequence.
  std::string decode(std::span<const int32_t> ids) const;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  // Tokens that end generation (EOS; for LLaMA 3 also <|eot_id|>).
  virtual std::vector<int32_t> eos_ids() const = 0;
  // Id of a special token by its text ("<|eot_id|>", "</s>"), if this tokenizer has it.
  virtual std::optional<int32_t> special_token(std::string_view text) const = 0;
  // "sentencepiece", "llama2c-bin", "tiktoken", "hf-bpe": for messages and template choice.
  virtual std::string kind() const = 0;
};

// Reads a tokenizer, recognising the format from the file's content (and name).
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);

// Turns a stream of token ids into text pieces that are always whole UTF-8: bytes of a
// character split across tokens are held back until the character is complete.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // The text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete character at the end of the stream).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  int32_t previous_ = -1;
  std::string pending_;
};

}  // namespace kuiper
