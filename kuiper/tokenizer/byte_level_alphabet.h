// GPT-2's byte-level alphabet, used by HF tokenizer.json vocabularies: every byte is written as
// one printable Unicode character (printable Latin-1 bytes as themselves, the others as
// U+0100 onwards in byte order), so that byte strings can be JSON keys.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kuiper {

// The bytes a vocabulary string stands for, or nothing if it uses a character outside the
// alphabet (or is not valid UTF-8).
std::optional<std::string> byte_level_to_bytes(std::string_view text);

// The other direction: every byte of `bytes` spelled as its alphabet character, in UTF-8.
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace kuiper
