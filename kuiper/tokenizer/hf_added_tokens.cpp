#include "kuiper/tokenizer/hf_added_tokens.h"

#include "kuiper/tokenizer/unicode_text.h"

namespace kuiper::hf {
namespace {

bool word_char_before(std::string_view text, size_t end) {
  return end > 0 && unicode::is_word_char(unicode::code_point_before(text, end).value);
}

bool word_char_at(std::string_view text, size_t start) {
  return start < text.size() && unicode::is_word_char(unicode::code_point_at(text, start).value);
}

}  // namespace

void AddedTokenMatcher::add(std::string pattern, const AddedToken& token) {
  if (pattern.empty()) return;
  first_bytes_[static_cast<uint8_t>(pattern[0])] = true;
  lengths_.insert(pattern.size());
  by_pattern_[std::move(pattern)] = token;
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text, bool allow_special) const {
  std::vector<TextSegment> segments;
  size_t plain_start = 0;  // where the ordinary text not yet written begins
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* token = nullptr;
    size_t length = 0;
    if (first_bytes_[static_cast<uint8_t>(text[pos])]) {
      for (const size_t candidate : lengths_) {
        if (candidate > text.size() - pos) continue;
        const auto it = by_pattern_.find(text.substr(pos, candidate));
        if (it != by_pattern_.end()) {
          token = &it->second;
          length = candidate;
          break;
        }
      }
    }
    if (token == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;  // matches never overlap, even a skipped one
    if (token->special && !allow_special) continue;
    if (token->single_word && (word_char_before(text, start) || word_char_at(text, stop))) continue;
    if (token->lstrip) start = std::max(unicode::white_space_run_start(text, start), plain_start);
    if (token->rstrip) stop = unicode::white_space_run_end(text, stop);
    if (start > plain_start) segments.push_back({plain_start, text.substr(plain_start, start - plain_start)});
    segments.push_back({start, text.substr(start, stop - start), token->id});
    plain_start = stop;
    pos = stop;
  }
  if (plain_start < text.size()) segments.push_back({plain_start, text.substr(plain_start)});
  return segments;
}

}  // namespace kuiper::hf
