// Unicode operations on UTF-8 text that HF tokenizer.json components need, done by ICU (the
// character database and normalization forms come from the library, not from tables here).
// Every function expects valid UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kuiper/base/status.h"

namespace kuiper::unicode {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

StatusOr<std::string> normalize(std::string_view text, NormalForm form);
// Each character's full lower-case mapping on its own (no context: a final Σ becomes σ), as
// tokenizers' Lowercase does with Rust's char::to_lowercase.
StatusOr<std::string> lowercase(std::string_view text);

// The code point starting at byte `offset` and its length in bytes.
struct CodePoint {
  char32_t value;
  size_t length;
};
CodePoint code_point_at(std::string_view text, size_t offset);
// The code point that ends at byte `end` (exclusive) and its length.
CodePoint code_point_before(std::string_view text, size_t end);

// Unicode White_Space (Rust's char::is_whitespace, regex \s).
bool is_white_space(char32_t c);
// Where the run of white space that ends at byte `end` starts.
size_t white_space_run_start(std::string_view text, size_t end);
// Where the run of white space that starts at byte `start` ends.
size_t white_space_run_end(std::string_view text, size_t start);

// `text` with every occurrence of `from` (non-empty), left to right, replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);
// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, join controls.
bool is_word_char(char32_t c);

}  // namespace kuiper::unicode
