// The "decoder" of an HF tokenizer.json, applied one token at a time so that generation can
// stream: Sequence, Replace (string pattern), ByteFallback, Fuse, Strip (leading characters
// only), Metaspace, ByteLevel; no decoder joins tokens with spaces, as tokenizers does.
// tokenizers decodes a whole sequence at once; one token at a time gives the same bytes
// because these decoders only look at the token itself and at whether it is the first of the
// sequence. Bytes, not text: where tokenizers writes U+FFFD for bytes that are not valid
// UTF-8, the caller (StreamDecoder) does the replacing.
#pragma once

#include <string>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/hf_json_fields.h"

namespace kuiper::hf {

class Decoder {
 public:
  static StatusOr<Decoder> parse(const json& node, const std::string& path);
  // The bytes of a token whose vocab or added-token string is `token`; `first` when it starts
  // the sequence.
  std::string decode(std::string token, bool first) const;

 private:
  enum class Kind { kReplace, kByteFallback, kStrip, kMetaspace, kByteLevel };
  struct Step {
    Kind kind;
    std::string from, to;  // Replace; Metaspace: from = the replacement character
    std::string content;   // Strip
    size_t start = 0;
    bool only_first = false;  // Strip after Fuse: the fused text's start is the first token's
    bool prepends = true;     // Metaspace: prepend_scheme is not "never"
  };
  Status add(const json& node, const std::string& path);
  std::vector<Step> steps_;
  bool fused_ = false;      // a Fuse (or ByteLevel, which fuses) has been seen
  bool has_decoder_ = false;
};

}  // namespace kuiper::hf
