// Tokenizer::decode and StreamDecoder: both are built on token_bytes, so every tokenizer gets
// them for free and they agree by construction.
#include "kuiper/tokenizer/tokenizer.h"
#include "kuiper/tokenizer/utf8.h"

namespace kuiper {

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  int32_t previous = -1;
  for (const int32_t id : ids) {
    text += token_bytes(id, previous);
    previous = id;
  }
  return text;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_.token_bytes(id, previous_);
  previous_ = id;
  return utf8::take_complete(pending_);
}

std::string StreamDecoder::flush() {
  // The stream ended inside a character: those bytes will never be completed, so they are
  // shown the way SentencePiece's decoder shows them, one U+FFFD each.
  std::string rest = utf8::replace_invalid(pending_);
  pending_.clear();
  return rest;
}

}  // namespace kuiper
