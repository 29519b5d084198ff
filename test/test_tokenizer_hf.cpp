// HF tokenizer.json byte-level BPE on small files written here. Exactness on a real
// vocabulary (a tokenizer.json generated from the LLaMA 3 ranks, against tiktoken and HF's own
// library) is checked by scripts/tokenizer_reference.py (ctest: tokenizer_reference).
#include <fstream>

#include <nlohmann/json.hpp>
#include <gtest/gtest.h>

#include "kuiper/tokenizer/hf_tokenizer_json.h"
#include "kuiper/tokenizer/tokenizer.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

// GPT-2's spelling of a byte as a character (printable Latin-1 as itself, the rest from
// U+0100 in byte order), written out as UTF-8.
std::string spell_byte(int byte) {
  auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; };
  int code_point = byte;
  if (!printable(byte)) {
    code_point = 256;
    for (int b = 0; b < byte; ++b) code_point += !printable(b);
  }
  std::string out;
  if (code_point < 0x80) {
    out += char(code_point);
  } else {
    out += char(0xC0 | (code_point >> 6));
    out += char(0x80 | (code_point & 0x3F));
  }
  return out;
}

std::string spell(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) out += spell_byte(static_cast<uint8_t>(c));
  return out;
}

// Bytes 0..255 are ids 0..255; merges build "hello" and " world" step by step.
json tiny_tokenizer(bool merges_as_pairs) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, char(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {" w", "o"}, {"r", "l"},
      {"rl", "d"}, {" wo", "rld"}};
  json merge_list = json::array();
  int next_id = 256;
  for (const auto& [left, right] : merges) {
    vocab[spell(left + right)] = next_id++;
    if (merges_as_pairs) {
      merge_list.push_back({spell(left), spell(right)});
    } else {
      merge_list.push_back(spell(left) + " " + spell(right));
    }
  }
  return {
      {"added_tokens", {{{"id", 265}, {"content", "<|end|>"}, {"special", true}},
                        {{"id", 266}, {"content", "[sep]"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::string write_json(const std::string& name, const json& doc) {
  const std::string path = test::scratch_dir("tokenizer_hf_" + name) + "/tokenizer.json";
  std::ofstream(path) << doc.dump();
  return path;
}

TEST(HfBpeTokenizer, BothMergeSpellingsGiveTheSameIds) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto strings, load_tokenizer(write_json("strings", tiny_tokenizer(false))));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto pairs, load_tokenizer(write_json("pairs", tiny_tokenizer(true))));
  EXPECT_EQ(strings->kind(), "hf-bpe");
  for (const std::string text : {"hello world", "hellohello  worlds", "héllo\n\twörld 123", ""}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(auto a, strings->encode(text, {.add_bos = false}));
    KUIPER_ASSERT_OK_AND_ASSIGN(auto b, pairs->encode(text, {.add_bos = false}));
    EXPECT_EQ(a, b) << text;
    EXPECT_EQ(strings->decode(a), text);
  }
  // "hello" and " world" are each reachable by the merges, so each ends as one token.
  KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, strings->encode("hello world", {.add_bos = false}));
  EXPECT_EQ(ids.size(), 2u);
}

TEST(HfBpeTokenizer, AddedTokens) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(write_json("added", tiny_tokenizer(false))));
  EXPECT_EQ(tokenizer->bos_id(), -1);  // nothing marks one
  EXPECT_EQ(tokenizer->special_token("<|end|>"), 265);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto plain, tokenizer->encode("a[sep]b<|end|>", {.add_bos = true}));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto special, tokenizer->encode("a[sep]b<|end|>", {.allow_special = true}));
  // Non-special added tokens are always matched, special ones only when allowed.
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 266), 1);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 265), 0);
  EXPECT_EQ(special.back(), 265);
  EXPECT_EQ(tokenizer->decode(plain), "a[sep]b<|end|>");
  EXPECT_EQ(tokenizer->decode(special), "a[sep]b<|end|>");
}

// A refusal must name what is unsupported, so that a user knows why the file does not load.
void expect_refused(const json& doc, const std::string& name, StatusCode code, const std::string& words) {
  const auto loaded = load_tokenizer(write_json(name, doc));
  ASSERT_FALSE(loaded.ok()) << name;
  EXPECT_EQ(loaded.status().code(), code) << loaded.status().to_string();
  EXPECT_NE(loaded.status().message().find(words), std::string::npos) << loaded.status().to_string();
}

TEST(HfBpeTokenizer, RefusesWhatItWouldGetWrong) {
  json doc = tiny_tokenizer(false);
  doc["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_refused(doc, "normalizer", StatusCode::kUnsupported, "normalizer \"Precompiled\"");

  doc = tiny_tokenizer(false);
  doc["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", "Contiguous"}};
  expect_refused(doc, "pre_tokenizer", StatusCode::kUnsupported, "pre-tokenizer \"Punctuation\"");

  doc = tiny_tokenizer(false);
  doc["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  expect_refused(doc, "decoder", StatusCode::kUnsupported, "decoder \"WordPiece\"");

  doc = tiny_tokenizer(false);
  doc["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_refused(doc, "post_processor", StatusCode::kUnsupported, "post_processor \"RobertaProcessing\"");

  doc = tiny_tokenizer(false);
  doc["model"]["type"] = "Unigram";
  expect_refused(doc, "unigram", StatusCode::kUnsupported, "model type \"Unigram\"");

  doc = tiny_tokenizer(false);
  doc["model"]["dropout"] = 0.1;
  expect_refused(doc, "dropout", StatusCode::kUnsupported, "dropout");

  doc = tiny_tokenizer(false);
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_refused(doc, "bad_regex", StatusCode::kInvalidFormat, "pre-tokenizer Split: pre-tokenizer pattern does not compile");

  doc = tiny_tokenizer(false);
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  expect_refused(doc, "two_char_replacement", StatusCode::kInvalidFormat, "not a single character");

  json nested = {{"type", "Lowercase"}};
  for (int depth = 0; depth < 1000; ++depth) nested = {{"type", "Sequence"}, {"normalizers", {nested}}};
  doc = tiny_tokenizer(false);
  doc["normalizer"] = nested;
  expect_refused(doc, "deep_sequence", StatusCode::kInvalidFormat, "nest deeper");

  doc = tiny_tokenizer(false);
  doc["model"]["merges"].push_back("q z");  // "qz" is not in the vocab
  expect_refused(doc, "bad_merge", StatusCode::kInvalidFormat, "merge 9");

  doc = tiny_tokenizer(false);
  doc["model"]["merges"].push_back("a b c");  // tokenizers requires exactly one space
  expect_refused(doc, "three_part_merge", StatusCode::kInvalidFormat, "merge 9");
}

TEST(HfBpeTokenizer, RefusesIdsOutOfRange) {
  for (const json& bad : {json(2147483647), json(2e9), json(1e300), json(-1), json(16777216), json("5"), json(3.5)}) {
    json doc = tiny_tokenizer(false);
    doc["added_tokens"][0]["id"] = bad;
    expect_refused(doc, "added_id", StatusCode::kInvalidFormat, "<|end|>");
    doc = tiny_tokenizer(false);
    doc["model"]["vocab"]["hello"] = bad;
    expect_refused(doc, "vocab_id", StatusCode::kInvalidFormat, "vocab entry \"hello\"");
  }
  json doc = tiny_tokenizer(false);
  doc["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {1e300}}, {"tokens", {"<|end|>"}}}}}}};
  expect_refused(doc, "template_id", StatusCode::kInvalidFormat, "special token \"<|end|>\"");
  // An id the reference library would assign differently is refused, not silently renumbered.
  doc = tiny_tokenizer(false);
  doc["added_tokens"][1]["id"] = 5000;
  expect_refused(doc, "renumbered", StatusCode::kInvalidFormat, "would give it id");
}

TEST(HfBpeTokenizer, LoadsAnAlreadyParsedDocument) {
  json doc = tiny_tokenizer(false);
  doc["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {265}}, {"tokens", {"<|end|>"}}}}}}};
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_hf_tokenizer_json(doc, "synthetic document"));
  EXPECT_EQ(tokenizer->bos_id(), 265);  // the template's first token
  KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer->encode("hello", {.add_bos = true}));
  EXPECT_EQ(ids, (std::vector<int32_t>{265, 259}));
  const auto refused = load_hf_tokenizer_json(json::array(), "synthetic document");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("synthetic document"), std::string::npos);
}

}  // namespace
}  // namespace kuiper
