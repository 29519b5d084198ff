// SentencePiece-style byte-fallback pieces: "<0x0A>" stands for the single byte 0x0A.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kuiper {

// The byte a "<0xNN>" piece stands for (two upper-case or lower-case hex digits), if `piece`
// is one.
inline std::optional<uint8_t> parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int high = hex(piece[3]);
  const int low = hex(piece[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<uint8_t>(high * 16 + low);
}

}  // namespace kuiper
