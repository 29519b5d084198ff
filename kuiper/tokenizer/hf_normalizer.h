// The "normalizer" of an HF tokenizer.json, applied to each stretch of text between added
// tokens before pre-tokenization: Sequence, Prepend, Replace (string or regex), NFC, NFD,
// NFKC, NFKD, Lowercase, Strip. Any other normalizer is refused by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/hf_json_fields.h"
#include "kuiper/tokenizer/regex_splitter.h"
#include "kuiper/tokenizer/unicode_text.h"

namespace kuiper::hf {

class Normalizer {
 public:
  // `node` is the file's "normalizer" (null: text passes unchanged).
  static StatusOr<Normalizer> parse(const json& node, const std::string& path);
  // `text` must be valid UTF-8.
  StatusOr<std::string> apply(std::string text) const;

 private:
  enum class Kind { kPrepend, kReplace, kUnicodeForm, kLowercase, kStrip };
  struct Step {
    Kind kind;
    std::string text;         // Prepend: what to prepend; Replace: the replacement
    std::string literal;      // Replace with a string pattern
    std::shared_ptr<const RegexSplitter> regex;  // Replace with a regex pattern
    unicode::NormalForm form = unicode::NormalForm::kNfc;
    bool strip_left = false;
    bool strip_right = false;
  };
  Status add(const json& node, const std::string& path);
  std::vector<Step> steps_;
};

}  // namespace kuiper::hf
