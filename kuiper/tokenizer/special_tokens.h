// The special tokens of a vocabulary ("<|eot_id|>", "</s>") by text, and the splitting of input
// text at them when the caller allows special tokens in text.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

// One stretch of input text: either ordinary text to tokenize, or a special token's id.
struct TextSegment {
  std::string_view text;    // empty for a special token
  int32_t special_id = -1;  // >= 0 for a special token
};

class SpecialTokens {
 public:
  void add(std::string text, int32_t id);
  std::optional<int32_t> find(std::string_view text) const;
  // Cuts `text` at every occurrence of a special token, leftmost first and, where several
  // start at the same place, the longest. Empty ordinary stretches are left out.
  std::vector<TextSegment> split(std::string_view text) const;
  // Appends to `ids` the ids of `text`: its special tokens as themselves, the stretches between
  // them through `encode_plain(stretch, ids)`.
  template <typename EncodePlain>
  Status encode(std::string_view text, std::vector<int32_t>& ids, const EncodePlain& encode_plain) const {
    for (const TextSegment& segment : split(text)) {
      if (segment.special_id >= 0) {
        ids.push_back(segment.special_id);
      } else {
        KUIPER_RETURN_IF_ERROR(encode_plain(segment.text, ids));
      }
    }
    return ok_status();
  }

 private:
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, int32_t, TransparentHash, std::equal_to<>> ids_;
  std::set<size_t, std::greater<>> lengths_;  // longest first
  bool first_bytes_[256] = {};                // bytes some special token starts with
};

}  // namespace kuiper
