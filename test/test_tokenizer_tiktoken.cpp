// The LLaMA 3 tiktoken tokenizer: properties that need no reference (round trips, special
// tokens, streaming, robustness). Id-for-id exactness against tiktoken itself is checked by
// scripts/tokenizer_reference.py (ctest: tokenizer_reference).
#include <gtest/gtest.h>

#include "kuiper/tokenizer/tokenizer.h"
#include "kuiper/tokenizer/utf8.h"
#include "test/test_util.h"
#include "test/tokenizer_test_corpus.h"

namespace kuiper {
namespace {

class TiktokenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = load_tokenizer(test::source_path("models/tokenizers/llama3/tokenizer.model"));
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    tokenizer_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static const Tokenizer* tokenizer_;
};
const Tokenizer* TiktokenTokenizer::tokenizer_ = nullptr;

TEST_F(TiktokenTokenizer, Vocabulary) {
  EXPECT_EQ(tokenizer_->kind(), "tiktoken");
  EXPECT_EQ(tokenizer_->vocab_size(), 128256);
  EXPECT_EQ(tokenizer_->bos_id(), 128000);
  EXPECT_EQ(tokenizer_->eos_ids(), (std::vector<int32_t>{128001, 128009}));
  EXPECT_EQ(tokenizer_->special_token("<|start_header_id|>"), 128006);
  EXPECT_EQ(tokenizer_->special_token("<|end_header_id|>"), 128007);
  EXPECT_EQ(tokenizer_->special_token("<|eom_id|>"), 128008);
  EXPECT_EQ(tokenizer_->special_token("<|python_tag|>"), 128010);
  EXPECT_EQ(tokenizer_->special_token("<|reserved_special_token_3|>"), 128011);
  EXPECT_EQ(tokenizer_->special_token("<|reserved_special_token_247|>"), 128255);
  EXPECT_EQ(tokenizer_->token_bytes(128009, 5), "<|eot_id|>");
}

TEST_F(TiktokenTokenizer, RoundTripAndStreamOnCorpus) {
  for (const std::string& text : test::tokenizer_corpus()) {
    KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer_->encode(text, {.add_bos = false}));
    EXPECT_EQ(tokenizer_->decode(ids), text);
    StreamDecoder decoder(*tokenizer_);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = decoder.push(id);
      EXPECT_TRUE(utf8::is_valid(piece));
      streamed += piece;
    }
    EXPECT_EQ(streamed + decoder.flush(), text);
  }
}

TEST_F(TiktokenTokenizer, SpecialTokensOnlyWhenAllowed) {
  const std::string text = "Hi<|eot_id|>";
  KUIPER_ASSERT_OK_AND_ASSIGN(auto plain, tokenizer_->encode(text, {.add_bos = true}));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto special, tokenizer_->encode(text, {.add_bos = true, .allow_special = true}));
  EXPECT_EQ(plain.front(), 128000);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128009), 0);
  EXPECT_EQ(special.back(), 128009);
  EXPECT_GT(plain.size(), special.size());
  EXPECT_EQ(tokenizer_->decode(plain), "<|begin_of_text|>" + text);
  EXPECT_EQ(tokenizer_->decode(special), "<|begin_of_text|>" + text);
}

TEST_F(TiktokenTokenizer, InvalidUtf8IsAnErrorNotACrash) {
  const auto result = tokenizer_->encode("ok \xFF\xFE then \xE2\x82", {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TiktokenTokenizer, LongRunsRoundTrip) {
  for (const std::string& text : {std::string(200000, ' '), std::string(200000, 'a'),
                                  std::string(100000, '\n') + "x", std::string(300000, '7')}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer_->encode(text, {.add_bos = false}));
    EXPECT_EQ(tokenizer_->decode(ids), text);
  }
}

}  // namespace
}  // namespace kuiper
