// UTF-8 helpers shared by the tokenizers and StreamDecoder. Validation follows RFC 3629 (no
// overlong forms, no surrogates, nothing above U+10FFFF), which is what SentencePiece and
// Python accept.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kuiper::utf8 {

// U+FFFD, written in place of each byte that cannot start or continue a valid character.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// Length of the valid character at the start of `text`: 1..4, or 0 when `text` does not start
// with a complete valid character (empty, invalid, or cut short).
size_t valid_char_length(std::string_view text);

// True when `text` is the beginning of a valid character that more bytes could complete.
bool is_incomplete_char(std::string_view text);

// True when all of `text` is valid UTF-8.
bool is_valid(std::string_view text);

// Moves the complete part of `pending` into the returned string, replacing every byte that can
// never become part of a valid character by U+FFFD (one per byte, as SentencePiece's decoder
// does); an incomplete character at the end stays in `pending`.
std::string take_complete(std::string& pending);

// `bytes` with each byte of an invalid or incomplete sequence replaced by U+FFFD.
std::string replace_invalid(std::string_view bytes);

}  // namespace kuiper::utf8
