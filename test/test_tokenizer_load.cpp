// load_tokenizer: format detection, directories, and one clear error per kind of bad file.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "kuiper/tokenizer/tokenizer.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& content) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

void expect_error(const StatusOr<std::unique_ptr<Tokenizer>>& loaded, StatusCode code,
                  const std::string& fragment) {
  ASSERT_FALSE(loaded.ok()) << "loaded, but should have failed with: " << fragment;
  EXPECT_EQ(loaded.status().code(), code) << loaded.status().to_string();
  EXPECT_NE(loaded.status().message().find(fragment), std::string::npos) << loaded.status().to_string();
  EXPECT_EQ(loaded.status().message().find('\n'), std::string::npos) << "one line";
}

TEST(LoadTokenizer, RecognisesEveryFormatByContent) {
  const std::string dir = test::scratch_dir("load_tokenizer_renamed");
  // Same names for different formats: only the content can tell them apart.
  const std::pair<const char*, const char*> cases[] = {
      {"models/tokenizers/llama2/tokenizer.model", "sentencepiece"},
      {"models/tokenizers/llama3/tokenizer.model", "tiktoken"},
      {"models/stories260K/tok512.model", "sentencepiece"},
      {"models/stories260K/tok512.bin", "llama2c-bin"}};
  for (const auto& [relative, kind] : cases) {
    const std::string copy = dir + "/renamed";
    std::filesystem::copy_file(test::source_path(relative), copy,
                               std::filesystem::copy_options::overwrite_existing);
    KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(copy));
    EXPECT_EQ(tokenizer->kind(), kind) << relative;
  }
}

TEST(LoadTokenizer, DirectoryPicksTheTokenizerInside) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/tokenizers/llama3")));
  EXPECT_EQ(tokenizer->kind(), "tiktoken");
  expect_error(load_tokenizer(test::scratch_dir("load_tokenizer_empty_dir")), StatusCode::kNotFound,
               "no tokenizer.json");
}

TEST(LoadTokenizer, MissingAndUnrecognisedFiles) {
  const std::string dir = test::scratch_dir("load_tokenizer_errors");
  expect_error(load_tokenizer(dir + "/nope.model"), StatusCode::kNotFound, "nope.model");
  expect_error(load_tokenizer(write_file(dir, "empty", "")), StatusCode::kInvalidFormat, "empty");
  expect_error(load_tokenizer(write_file(dir, "text", "just some words\n")), StatusCode::kInvalidFormat,
               "unrecognised tokenizer format");
}

TEST(LoadTokenizer, GarbageTiktokenLineNamesTheLine) {
  const std::string dir = test::scratch_dir("load_tokenizer_tiktoken");
  std::ifstream in(test::source_path("models/tokenizers/llama3/tokenizer.model"));
  std::string content, line;
  for (int i = 0; i < 300 && std::getline(in, line); ++i) content += line + "\n";
  expect_error(load_tokenizer(write_file(dir, "bad_base64", content + "@@@@ 300\n")),
               StatusCode::kInvalidFormat, "line 301: token is not valid base64");
  expect_error(load_tokenizer(write_file(dir, "bad_rank", content + "QUJD x\n")),
               StatusCode::kInvalidFormat, "line 301: rank \"x\"");
  expect_error(load_tokenizer(write_file(dir, "duplicate", content + "IQ== 300\n")),
               StatusCode::kInvalidFormat, "line 301: rank 300 or its token appears twice");
  expect_error(load_tokenizer(write_file(dir, "no_space", content + "QUJD\n")),
               StatusCode::kInvalidFormat, "line 301: expected");
}

TEST(LoadTokenizer, TruncatedSentencePieceModel) {
  std::ifstream in(test::source_path("models/stories260K/tok512.model"), std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string dir = test::scratch_dir("load_tokenizer_sentencepiece");
  expect_error(load_tokenizer(write_file(dir, "tokenizer.model", model.substr(0, model.size() / 2))),
               StatusCode::kInvalidFormat, "not a valid SentencePiece model");
}

TEST(LoadTokenizer, BrokenJson) {
  const std::string dir = test::scratch_dir("load_tokenizer_json");
  expect_error(load_tokenizer(write_file(dir, "tokenizer.json", "{\"model\": [1, 2")),
               StatusCode::kInvalidFormat, "not valid JSON");
  expect_error(load_tokenizer(write_file(dir, "tokenizer.json", "{\"version\": \"1.0\"}")),
               StatusCode::kInvalidFormat, "model is missing");
}

TEST(LoadTokenizer, DirectoryPrefersTokenizerModelOverTokenizerJson) {
  // The layout of LLaMA-2-*-hf and TinyLlama: both files; the SentencePiece model is read.
  const std::string dir = test::scratch_dir("load_tokenizer_both");
  std::filesystem::copy_file(test::source_path("models/tokenizers/llama2/tokenizer.model"), dir + "/tokenizer.model");
  write_file(dir, "tokenizer.json", "{\"version\": \"1.0\"}");  // would be refused if chosen
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(dir));
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
}

}  // namespace
}  // namespace kuiper
