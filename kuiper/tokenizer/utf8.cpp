#include "kuiper/tokenizer/utf8.h"

#include <cstdint>

namespace kuiper::utf8 {
namespace {

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

// Expected length of a character from its first byte, or 0 for a byte no character starts with.
size_t length_from_lead(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The allowed range of the second byte depends on the first: this is what rules out overlong
// forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points above U+10FFFF (F4 90..).
bool second_byte_allowed(uint8_t lead, uint8_t second) {
  switch (lead) {
    case 0xE0: return second >= 0xA0 && second <= 0xBF;
    case 0xED: return second >= 0x80 && second <= 0x9F;
    case 0xF0: return second >= 0x90 && second <= 0xBF;
    case 0xF4: return second >= 0x80 && second <= 0x8F;
    default: return is_continuation(second);
  }
}

// How many leading bytes of `text` are consistent with one valid character (at most its length).
size_t consistent_prefix(std::string_view text, size_t* expected) {
  *expected = 0;
  if (text.empty()) return 0;
  const auto lead = static_cast<uint8_t>(text[0]);
  *expected = length_from_lead(lead);
  if (*expected == 0) return 0;
  size_t n = 1;
  while (n < *expected && n < text.size()) {
    const auto byte = static_cast<uint8_t>(text[n]);
    const bool allowed = n == 1 ? second_byte_allowed(lead, byte) : is_continuation(byte);
    if (!allowed) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t valid_char_length(std::string_view text) {
  size_t expected;
  const size_t n = consistent_prefix(text, &expected);
  return n == expected ? n : 0;
}

bool is_incomplete_char(std::string_view text) {
  size_t expected;
  const size_t n = consistent_prefix(text, &expected);
  return n == text.size() && n > 0 && n < expected;
}

bool is_valid(std::string_view text) {
  while (!text.empty()) {
    const size_t n = valid_char_length(text);
    if (n == 0) return false;
    text.remove_prefix(n);
  }
  return true;
}

std::string take_complete(std::string& pending) {
  std::string out;
  std::string_view rest = pending;
  while (!rest.empty()) {
    const size_t n = valid_char_length(rest);
    if (n > 0) {
      out.append(rest.substr(0, n));
      rest.remove_prefix(n);
    } else if (is_incomplete_char(rest)) {
      break;  // may still be completed by the next token
    } else {
      out.append(kReplacementCharacter);
      rest.remove_prefix(1);
    }
  }
  pending.erase(0, pending.size() - rest.size());
  return out;
}

std::string replace_invalid(std::string_view bytes) {
  std::string pending(bytes);
  std::string out = take_complete(pending);
  for (size_t i = 0; i < pending.size(); ++i) out.append(kReplacementCharacter);
  return out;
}

}  // namespace kuiper::utf8
