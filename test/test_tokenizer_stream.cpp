// StreamDecoder and the UTF-8 helpers under it, with a tokenizer whose tokens are single bytes,
// so that characters can be cut anywhere.
#include <gtest/gtest.h>

#include "kuiper/tokenizer/tokenizer.h"
#include "kuiper/tokenizer/utf8.h"

namespace kuiper {
namespace {

// Token i is the byte i.
class ByteTokenizer final : public Tokenizer {
 public:
  StatusOr<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions&) const override {
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(static_cast<uint8_t>(c));
    return ids;
  }
  std::string token_bytes(int32_t id, int32_t) const override { return std::string(1, char(id)); }
  int32_t vocab_size() const override { return 256; }
  int32_t bos_id() const override { return -1; }
  std::vector<int32_t> eos_ids() const override { return {}; }
  std::optional<int32_t> special_token(std::string_view) const override { return std::nullopt; }
  std::string kind() const override { return "bytes"; }
};

std::string stream(const Tokenizer& tokenizer, const std::string& bytes,
                   std::vector<std::string>* pieces = nullptr) {
  StreamDecoder decoder(tokenizer);
  std::string out;
  const auto ids = tokenizer.encode(bytes, {});
  for (const int32_t id : *ids) {
    const std::string piece = decoder.push(id);
    if (pieces) pieces->push_back(piece);
    out += piece;
  }
  return out + decoder.flush();
}

TEST(TokenizerStreamDecoder, HoldsBackSplitCharactersUntilComplete) {
  ByteTokenizer tokenizer;
  const std::string text = "a€😀é";  // 1, 3, 4 and 2 bytes
  std::vector<std::string> pieces;
  EXPECT_EQ(stream(tokenizer, text, &pieces), text);
  const std::vector<std::string> expected = {"a", "", "", "€", "", "", "", "😀", "", "é"};
  EXPECT_EQ(pieces, expected);
}

TEST(TokenizerStreamDecoder, EveryPieceIsValidUtf8) {
  ByteTokenizer tokenizer;
  const std::string text = "Привет 你好 👨‍👩‍👧 \xF0\x9F";  // ends inside a character
  std::vector<std::string> pieces;
  stream(tokenizer, text, &pieces);
  for (const std::string& piece : pieces) EXPECT_TRUE(utf8::is_valid(piece)) << piece;
}

TEST(TokenizerStreamDecoder, InvalidBytesBecomeOneReplacementEach) {
  ByteTokenizer tokenizer;
  // A stray continuation byte, an impossible byte, an overlong form, a surrogate, a character
  // cut short by ASCII, and one cut short by the end of the stream.
  const std::string bytes = "x\x80y\xFFz\xC0\xAF.\xED\xA0\x80.\xE2\x82!\xF0\x9F\x98";
  const std::string r(utf8::kReplacementCharacter);
  EXPECT_EQ(stream(tokenizer, bytes), "x" + r + "y" + r + "z" + r + r + "." + r + r + r + "." +
                                          r + r + "!" + r + r + r);
}

TEST(TokenizerStreamDecoder, StreamEqualsWholeDecodeForValidText) {
  ByteTokenizer tokenizer;
  const std::string text = "mixed ascii, ελληνικά, 日本語, 🏳️‍🌈\r\n\t end";
  const auto ids = *tokenizer.encode(text, {});
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(stream(tokenizer, text), text);
}

TEST(TokenizerUtf8, ValidationFollowsRfc3629) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("\x7F\xC2\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(utf8::is_valid("\xC1\xBF"));          // overlong
  EXPECT_FALSE(utf8::is_valid("\xE0\x9F\xBF"));      // overlong
  EXPECT_FALSE(utf8::is_valid("\xED\xBF\xBF"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("\xE2\x82"));          // cut short
  EXPECT_TRUE(utf8::is_incomplete_char("\xE2\x82"));
  EXPECT_FALSE(utf8::is_incomplete_char("\xE2\x82\xAC"));
  EXPECT_FALSE(utf8::is_incomplete_char("\xED\xA0"));  // can only become a surrogate
}

}  // namespace
}  // namespace kuiper
