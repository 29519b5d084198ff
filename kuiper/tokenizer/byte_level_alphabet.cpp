#include "kuiper/tokenizer/byte_level_alphabet.h"

#include <array>
#include <cstdint>

#include "kuiper/tokenizer/utf8.h"

namespace kuiper {
namespace {

bool prints_as_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

// Code point -> byte for the 324 code points the alphabet uses (-1 elsewhere).
std::array<int, 324> build_byte_of_code_point() {
  std::array<int, 324> byte_of;
  byte_of.fill(-1);
  int next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) {
    byte_of[prints_as_itself(byte) ? byte : next_extra++] = byte;
  }
  return byte_of;
}

uint32_t decode_code_point(std::string_view character) {
  const auto lead = static_cast<uint8_t>(character[0]);
  if (character.size() == 1) return lead;
  uint32_t value = lead & (0xFF >> (character.size() + 1));
  for (size_t i = 1; i < character.size(); ++i) {
    value = (value << 6) | (static_cast<uint8_t>(character[i]) & 0x3F);
  }
  return value;
}

// Byte -> its character, UTF-8 encoded (one or two bytes: all code points are below 0x800).
std::array<std::string, 256> build_spelling() {
  const std::array<int, 324> byte_of = build_byte_of_code_point();
  std::array<std::string, 256> spelling;
  for (int code_point = 0; code_point < static_cast<int>(byte_of.size()); ++code_point) {
    if (byte_of[code_point] < 0) continue;
    std::string& out = spelling[byte_of[code_point]];
    if (code_point < 0x80) {
      out = std::string(1, static_cast<char>(code_point));
    } else {
      out = {static_cast<char>(0xC0 | (code_point >> 6)), static_cast<char>(0x80 | (code_point & 0x3F))};
    }
  }
  return spelling;
}

}  // namespace

std::string bytes_to_byte_level(std::string_view bytes) {
  static const std::array<std::string, 256> spelling = build_spelling();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char byte : bytes) out += spelling[static_cast<uint8_t>(byte)];
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  static const std::array<int, 324> byte_of = build_byte_of_code_point();
  std::string bytes;
  while (!text.empty()) {
    const size_t length = utf8::valid_char_length(text);
    if (length == 0) return std::nullopt;
    const uint32_t code_point = decode_code_point(text.substr(0, length));
    if (code_point >= byte_of.size() || byte_of[code_point] < 0) return std::nullopt;
    bytes += static_cast<char>(byte_of[code_point]);
    text.remove_prefix(length);
  }
  return bytes;
}

}  // namespace kuiper
