// strip_message: the reference chat code strips every message with Python's str.strip(), which
// removes Unicode whitespace (U+00A0, U+3000, ...), not only ASCII; matching it exactly keeps
// the token ids equal to the reference for any message.
#include <cstdint>

#include "kuiper/generation/chat_template.h"

namespace kuiper {
namespace {

// Code points for which Python's str.isspace() is true.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// The code point encoded by `bytes` (one whole UTF-8 character, 1-4 bytes), or U+FFFD when the
// bytes are not a well-formed character; U+FFFD is not whitespace, so stripping stops there.
char32_t decode_char(std::string_view bytes) {
  const auto lead = static_cast<unsigned char>(bytes[0]);
  size_t length = 0;
  char32_t c = 0;
  if (lead < 0x80) return lead;
  if ((lead & 0xE0) == 0xC0) { length = 2; c = lead & 0x1F; }
  else if ((lead & 0xF0) == 0xE0) { length = 3; c = lead & 0x0F; }
  else if ((lead & 0xF8) == 0xF0) { length = 4; c = lead & 0x07; }
  if (length == 0 || bytes.size() != length) return 0xFFFD;
  for (size_t i = 1; i < length; ++i) {
    if (!is_continuation(bytes[i])) return 0xFFFD;
    c = (c << 6) | (static_cast<unsigned char>(bytes[i]) & 0x3F);
  }
  return c;
}

size_t first_char_length(std::string_view text) {
  if (static_cast<unsigned char>(text[0]) < 0x80) return 1;
  size_t n = 1;
  while (n < text.size() && n < 4 && is_continuation(text[n])) ++n;
  return n;
}

size_t last_char_length(std::string_view text) {
  size_t n = 1;
  while (n < text.size() && n < 4 && is_continuation(text[text.size() - n])) ++n;
  return n;
}

}  // namespace

std::string_view strip_message(std::string_view text) {
  while (!text.empty()) {
    const size_t n = first_char_length(text);
    if (!is_python_space(decode_char(text.substr(0, n)))) break;
    text.remove_prefix(n);
  }
  while (!text.empty()) {
    const size_t n = last_char_length(text);
    if (!is_python_space(decode_char(text.substr(text.size() - n)))) break;
    text.remove_suffix(n);
  }
  return text;
}

}  // namespace kuiper
