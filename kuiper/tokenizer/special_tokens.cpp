#include "kuiper/tokenizer/special_tokens.h"

namespace kuiper {

void SpecialTokens::add(std::string text, int32_t id) {
  if (text.empty()) return;
  first_bytes_[static_cast<uint8_t>(text[0])] = true;
  lengths_.insert(text.size());
  ids_[std::move(text)] = id;
}

std::optional<int32_t> SpecialTokens::find(std::string_view text) const {
  const auto it = ids_.find(text);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::vector<TextSegment> SpecialTokens::split(std::string_view text) const {
  std::vector<TextSegment> segments;
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    std::optional<int32_t> match;
    size_t match_length = 0;
    if (first_bytes_[static_cast<uint8_t>(text[pos])]) {
      for (const size_t length : lengths_) {
        if (length > text.size() - pos) continue;
        if ((match = find(text.substr(pos, length)))) {
          match_length = length;
          break;
        }
      }
    }
    if (!match) {
      ++pos;
      continue;
    }
    if (pos > plain_start) segments.push_back({text.substr(plain_start, pos - plain_start)});
    segments.push_back({{}, *match});
    pos += match_length;
    plain_start = pos;
  }
  if (plain_start < text.size()) segments.push_back({text.substr(plain_start)});
  return segments;
}

}  // namespace kuiper
