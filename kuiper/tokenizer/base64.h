// Standard base64 (RFC 4648 alphabet, '=' padding), as in tiktoken's rank files.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kuiper {

// The decoded bytes, or nothing when `text` is not well-formed base64.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace kuiper
