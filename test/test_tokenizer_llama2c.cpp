// llama2.c tokenizer.bin against libsentencepiece on the same vocabulary (tok512.bin vs
// tok512.model), and its file errors.
#include <filesystem>
#include <fstream>

#include <sentencepiece_processor.h>
#include <gtest/gtest.h>

#include "kuiper/tokenizer/tokenizer.h"
#include "test/test_util.h"
#include "test/tokenizer_test_corpus.h"

namespace kuiper {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string write_file(const std::string& name, const std::string& content) {
  const std::string path = test::scratch_dir("tokenizer_llama2c_" + name) + "/tokenizer.bin";
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(Llama2cTokenizer, MatchesSentencePieceWhereTheAlgorithmsAgree) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.bin")));
  EXPECT_EQ(tokenizer->kind(), "llama2c-bin");
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(test::source_path("models/stories260K/tok512.model")).ok());
  int compared = 0;
  for (const std::string& text : test::tokenizer_corpus()) {
    // llama2.c encodes raw text; SentencePiece first normalizes it (tok512 folds runs of
    // whitespace and strips the ends). Only text normalization leaves alone can agree.
    std::vector<int> expected;
    ASSERT_TRUE(sp.Encode(text, &expected).ok());
    if (sp.DecodeIds(expected) != text) continue;
    ++compared;
    KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer->encode(text, {.add_bos = false}));
    ASSERT_EQ(ids, std::vector<int32_t>(expected.begin(), expected.end())) << text;
    expected.insert(expected.begin(), 1);
    ids.insert(ids.begin(), 1);
    EXPECT_EQ(tokenizer->decode(ids), sp.DecodeIds(expected)) << text;
  }
  EXPECT_GT(compared, 50);
}

TEST(Llama2cTokenizer, DecodesLikeRunC) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.bin")));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer->encode("Hi\n", {.add_bos = true}));
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tokenizer->decode(ids), "Hi\n");                  // no leading space after <s>
  EXPECT_EQ(tokenizer->token_bytes(3 + '\n', 42), "\n");      // <0x0A> is the raw byte
  EXPECT_EQ(tokenizer->token_bytes(2, 42), "");              // </s> prints nothing
  EXPECT_EQ(tokenizer->eos_ids(), std::vector<int32_t>{2});
}

TEST(Llama2cTokenizer, TruncatedFileNamesTheOffset) {
  const std::string good = read_file(test::source_path("models/stories260K/tok512.bin"));
  for (const size_t cut : {size_t{6}, size_t{9}, good.size() - 3}) {
    const auto loaded = load_tokenizer(write_file("cut" + std::to_string(cut), good.substr(0, cut)));
    ASSERT_FALSE(loaded.ok()) << cut;
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidFormat);
    EXPECT_NE(loaded.status().message().find("truncated"), std::string::npos) << loaded.status().to_string();
  }
}

TEST(Llama2cTokenizer, CorruptLengthIsReported) {
  std::string bad = read_file(test::source_path("models/stories260K/tok512.bin"));
  const int32_t huge = 1 << 20;
  std::memcpy(bad.data() + 4 + 4, &huge, 4);  // first token's length
  const auto loaded = load_tokenizer(write_file("length", bad));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("byte offset 4"), std::string::npos) << loaded.status().to_string();
}

}  // namespace
}  // namespace kuiper
