// Checkpoint loading: good files of each llama2.c layout, and every kind of bad file refused
// with a clear error instead of a crash or garbage.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "kuiper/checkpoint/formats/llama2c_writer.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::expect_load_refused;

const std::string kStoriesModel = "models/stories260K/stories260K.bin";

void append_fp32(std::vector<char>& out, const Tensor& t) {
  const char* p = static_cast<const char*>(t.raw_data());
  out.insert(out.end(), p, p + t.nbytes());
}

// The legacy llama2.c layout, written independently of the loader for the test.
std::vector<char> make_v0_file(const Checkpoint& ckpt) {
  const LlamaConfig& c = ckpt.config;
  const LlamaWeights& w = ckpt.weights;
  const int32_t header[] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                            c.shared_classifier ? c.vocab_size : -c.vocab_size, c.max_seq_len};
  const char* header_bytes = reinterpret_cast<const char*>(header);
  std::vector<char> out(header_bytes, header_bytes + sizeof(header));
  append_fp32(out, w.token_embedding.values);
  for (auto& l : w.layers) append_fp32(out, l.attention_norm);
  for (auto& l : w.layers) append_fp32(out, l.wq.values);
  for (auto& l : w.layers) append_fp32(out, l.wk.values);
  for (auto& l : w.layers) append_fp32(out, l.wv.values);
  for (auto& l : w.layers) append_fp32(out, l.wo.values);
  for (auto& l : w.layers) append_fp32(out, l.ffn_norm);
  for (auto& l : w.layers) append_fp32(out, l.w1.values);
  for (auto& l : w.layers) append_fp32(out, l.w2.values);
  for (auto& l : w.layers) append_fp32(out, l.w3.values);
  append_fp32(out, w.final_norm);
  out.resize(out.size() + sizeof(float) * c.max_seq_len * c.head_dim(), 0);  // freq_cis tables
  if (!c.shared_classifier) append_fp32(out, w.classifier.values);
  return out;
}

TEST(Checkpoint, StoriesV0Header) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  const LlamaConfig& c = ckpt.config;
  // The figures shared/README.md gives for this file.
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(ckpt.format, "llama2.c v0 (fp32)");
}

TEST(Checkpoint, V1RoundTripGivesIdenticalWeightsAndLogits) {
  const std::string dir = test::scratch_dir("v1_round_trip");
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint v0, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK(save_llama2c_v1(v0, dir + "/stories.v1.bin"));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint v1, load_checkpoint(dir + "/stories.v1.bin"));
  EXPECT_EQ(v1.format, "llama2.c v1 (fp32)");
  EXPECT_EQ(v1.config.summary(), v0.config.summary());
  const auto same = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  };
  EXPECT_TRUE(same(v1.weights.token_embedding.values, v0.weights.token_embedding.values));
  for (int l = 0; l < v0.config.n_layers; ++l) {
    EXPECT_TRUE(same(v1.weights.layers[l].wq.values, v0.weights.layers[l].wq.values));
    EXPECT_TRUE(same(v1.weights.layers[l].w2.values, v0.weights.layers[l].w2.values));
    EXPECT_TRUE(same(v1.weights.layers[l].ffn_norm, v0.weights.layers[l].ffn_norm));
  }
  const std::vector<int32_t> ids = {1, 403, 407, 261};
  EXPECT_EQ(test::last_logits(v1, ids), test::last_logits(v0, ids));
}

TEST(Checkpoint, UnsharedClassifierInBothLayouts) {
  LlamaConfig c = test::model_shape(48, 80, 2, 6, 3, 77, 32);
  c.shared_classifier = false;
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint random, make_random_checkpoint(c, 3));
  const std::string dir = test::scratch_dir("unshared");
  test::write_bytes(dir + "/v0.bin", make_v0_file(random));
  KUIPER_ASSERT_OK(save_llama2c_v1(random, dir + "/v1.bin"));
  const std::vector<int32_t> ids = {1, 5, 70, 3};
  const auto expected = test::last_logits(random, ids);
  for (const char* name : {"/v0.bin", "/v1.bin"}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint loaded, load_checkpoint(dir + name));
    EXPECT_FALSE(loaded.config.shared_classifier) << name;
    EXPECT_EQ(test::last_logits(loaded, ids), expected) << name;
  }
}

TEST(Checkpoint, RefusesTruncatedAndPaddedFiles) {
  const std::string dir = test::scratch_dir("truncated");
  const auto good = test::read_bytes(test::source_path(kStoriesModel));
  test::write_bytes(dir + "/short.bin", std::vector<char>(good.begin(), good.end() - 100));
  expect_load_refused(dir + "/short.bin", "short.bin");
  test::write_bytes(dir + "/header_only.bin", std::vector<char>(good.begin(), good.begin() + 20));
  expect_load_refused(dir + "/header_only.bin", "header_only.bin");
  auto padded = good;
  padded.resize(padded.size() + 8, 0);
  test::write_bytes(dir + "/padded.bin", padded);
  expect_load_refused(dir + "/padded.bin", "padded.bin");

  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint v0, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK(save_llama2c_v1(v0, dir + "/v1.bin"));
  const auto v1 = test::read_bytes(dir + "/v1.bin");
  test::write_bytes(dir + "/v1_short.bin", std::vector<char>(v1.begin(), v1.end() - 4));
  expect_load_refused(dir + "/v1_short.bin", "implies");
}

TEST(Checkpoint, RefusesCorruptHeaders) {
  const std::string dir = test::scratch_dir("corrupt");
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint v0, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK(save_llama2c_v1(v0, dir + "/v1.bin"));
  const auto v1 = test::read_bytes(dir + "/v1.bin");

  auto bad_version = v1;
  bad_version[4] = 7;
  test::write_bytes(dir + "/version.bin", bad_version);
  expect_load_refused(dir + "/version.bin", "version.bin");

  auto heads = v1;
  const int32_t seven_heads = 7;  // 64 is not divisible by 7
  std::memcpy(heads.data() + 8 + 3 * 4, &seven_heads, 4);
  test::write_bytes(dir + "/heads.bin", heads);
  expect_load_refused(dir + "/heads.bin", "divisible");

  auto negative = v1;
  const int32_t minus = -64;
  std::memcpy(negative.data() + 8, &minus, 4);
  test::write_bytes(dir + "/negative.bin", negative);
  expect_load_refused(dir + "/negative.bin", "positive");

  auto bad_flag = v1;
  bad_flag[8 + 7 * 4] = 9;
  test::write_bytes(dir + "/flag.bin", bad_flag);
  expect_load_refused(dir + "/flag.bin", "flag");
}

TEST(Checkpoint, RefusesFilesThatAreNotCheckpoints) {
  const std::string dir = test::scratch_dir("not_checkpoints");
  expect_load_refused(dir + "/missing.bin", "no such file");
  test::write_bytes(dir + "/empty.bin", {});
  expect_load_refused(dir + "/empty.bin", "empty");
  test::write_bytes(dir + "/text.bin", std::vector<char>(1000, 'x'));
  expect_load_refused(dir + "/text.bin", "not a checkpoint format");
  // A tokenizer is a real file of the wrong kind.
  expect_load_refused(test::source_path("models/stories260K/tok512.model"), "not a checkpoint format");

  auto forced = load_checkpoint(test::source_path(kStoriesModel), {"no-such-format"});
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("unknown checkpoint format"), std::string::npos);
  // Forcing the v1 reader on a v0 file fails on the magic instead of reading garbage.
  auto wrong = load_checkpoint(test::source_path(kStoriesModel), {"llama2c-v1"});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("magic"), std::string::npos);
}

}  // namespace
}  // namespace kuiper
