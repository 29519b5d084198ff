// The "added_tokens" of an HF tokenizer.json and how tokenizers finds them in text: tokens with
// normalized=false are looked for in the raw text, the others in the normalized text (their
// content normalized the same way); leftmost match first, the longest where several start at
// the same place; single_word, lstrip and rstrip as tokenizers defines them. Special tokens
// are only recognised when the caller allows them; where one is skipped, its text stays
// ordinary text.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kuiper::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A stretch of text: ordinary text (id < 0) or one added token.
struct TextSegment {
  size_t start = 0;  // byte offset in the text that was split
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  // `pattern` is what is searched for (the content, or its normalized form).
  void add(std::string pattern, const AddedToken& token);
  bool empty() const { return by_pattern_.empty(); }
  std::vector<TextSegment> split(std::string_view text, bool allow_special) const;

 private:
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, AddedToken, TransparentHash, std::equal_to<>> by_pattern_;
  std::set<size_t, std::greater<>> lengths_;  // longest first
  bool first_bytes_[256] = {};
};

}  // namespace kuiper::hf
