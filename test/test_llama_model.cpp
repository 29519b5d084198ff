// End-to-end checks of the CPU model: the bundled stories260K against llama2.c's output,
// batched prefill against token-by-token decoding, and awkward shapes (GQA, unshared classifier).
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "kuiper/generation/session.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::to_host;

using test::relative_error;

const std::string kStoriesModel = "models/stories260K/stories260K.bin";
const std::string kStoriesTokenizer = "models/stories260K/tok512.model";

// Logits of every position computed one token at a time (the decode path).
std::vector<std::vector<float>> sequential_logits(LlamaModel& model, const std::vector<int32_t>& ids) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto logits = model.forward(std::span(ids).subspan(i, 1), static_cast<int>(i));
    CHECK(logits.ok()) << logits.status().to_string();
    out.push_back(to_host(*logits));
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Greedy continuation of "Once upon a time" by stories260K + tok512 through the engine (as
// llama_infer runs it), with a KV cache of `context` positions (0: the model's).
struct StoriesRun {
  std::string text;
  GenerationStats stats;
};
StoriesRun stories_greedy(int context, int max_new_tokens) {
  auto ckpt = load_checkpoint(test::source_path(kStoriesModel));
  CHECK(ckpt.ok()) << ckpt.status().to_string();
  auto tokenizer = load_tokenizer(test::source_path(kStoriesTokenizer));
  CHECK(tokenizer.ok()) << tokenizer.status().to_string();
  ModelOptions model;
  model.context = context;
  auto engine = Engine::create(ckpt->config, ckpt->weights, model, **tokenizer, {.max_seqs = 1});
  CHECK(engine.ok()) << engine.status().to_string();
  Session session(**engine, {.temperature = 0.f});
  const std::string prompt = "Once upon a time";
  auto ids = (*tokenizer)->encode(prompt);
  CHECK(ids.ok()) << ids.status().to_string();
  StoriesRun run{prompt, {}};
  auto stats = session.generate(*ids, {.max_new_tokens = max_new_tokens}, [&](std::string_view piece) {
    run.text += piece;
    return true;
  });
  CHECK(stats.ok()) << stats.status().to_string();
  run.stats = *stats;
  return run;
}

// Reference: llama2.c's run.c (independent code), stories260K.bin + tok512, temperature 0,
// prompt "Once upon a time" (5 tokens with BOS); regenerate with scripts/llama2c_reference.sh.
// run.c's steps are positions: the prompt's last position is the first one it samples at.
TEST(LlamaModel, StoriesGreedyMatchesLlama2c) {
  // 256 steps. Its first sentences are also quoted in shared/README.md.
  const std::string expected = read_text(test::source_path("test/data/llama2c_stories260K_greedy.txt"));
  ASSERT_GT(expected.size(), 500u);
  ASSERT_EQ(expected.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u);
  const int max_new_tokens = 256 - 5 + 1;
  const StoriesRun run = stories_greedy(0, max_new_tokens);
  EXPECT_EQ(run.stats.generated_tokens, max_new_tokens);
  EXPECT_EQ(run.text, expected);
}

TEST(LlamaModel, StoriesGreedyToTheEndOfTheContextMatchesLlama2c) {
  // run.c's 64 steps against a context of 64 run to its end: every position samples a token,
  // the last one included (that token is emitted, never run).
  const std::string expected = read_text(test::source_path("test/data/llama2c_stories260K_greedy_context64.txt"));
  ASSERT_EQ(expected.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u);
  const StoriesRun run = stories_greedy(64, 1000);
  EXPECT_EQ(run.stats.generated_tokens, 64 - 5 + 1);
  EXPECT_EQ(run.stats.stop_reason, StopReason::kContextFull);
  EXPECT_EQ(run.text, expected);
}

TEST(LlamaModel, BatchedPrefillMatchesTokenByToken) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  ModelOptions options;
  options.max_batch = 7;  // forces several chunks, the last one partial
  KUIPER_ASSERT_OK_AND_ASSIGN(auto batched, LlamaModel::create(ckpt.config, ckpt.weights, options));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto stepwise, LlamaModel::create(ckpt.config, ckpt.weights, {}));
  // Past 256 positions: the token-by-token steps hand attention first 256 cache rows, then 512
  // (op::decode_attention_reach), the prefill the whole cache.
  std::vector<int32_t> ids = {1};
  for (int i = 0; i < 299; ++i) ids.push_back((i * 37 + 11) % 512);

  const auto reference = sequential_logits(*stepwise, ids);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor last, batched->forward(ids, 0));
  const auto last_host = to_host(last);
  EXPECT_LT(relative_error(last_host.data(), reference.back().data(), last_host.size()), 1e-5);

  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor all, batched->forward_all(ids, 0));
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = all.data<float>() + i * all.dim(1);
    EXPECT_LT(relative_error(row, reference[i].data(), reference[i].size()), 1e-5) << "position " << i;
  }
}

TEST(LlamaModel, PrefillContinuesFromStartPosition) {
  // A prompt split across two prefills (start position > 0) equals one prefill of the whole.
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto model, LlamaModel::create(ckpt.config, ckpt.weights, {}));
  std::vector<int32_t> ids;
  for (int i = 0; i < 30; ++i) ids.push_back((i * 53 + 5) % 512);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor whole, model->forward(ids, 0));
  const auto expected = to_host(whole);
  KUIPER_ASSERT_OK(model->forward(std::span(ids).first(17), 0).status());
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor split, model->forward(std::span(ids).subspan(17), 17));
  const auto got = to_host(split);
  EXPECT_LT(relative_error(got.data(), expected.data(), got.size()), 1e-5);
}

TEST(LlamaModel, GqaUnsharedClassifierRandomModel) {
  LlamaConfig c = test::model_shape(96, 200, 3, 8, 2, 301, 64);
  c.shared_classifier = false;
  c.rope_theta = 500000.f;
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, make_random_checkpoint(c, 7));
  ModelOptions options;
  options.max_batch = 5;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto batched, LlamaModel::create(ckpt.config, ckpt.weights, options));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto stepwise, LlamaModel::create(ckpt.config, ckpt.weights, {}));
  std::vector<int32_t> ids;
  for (int i = 0; i < 23; ++i) ids.push_back((i * 97 + 3) % c.vocab_size);
  const auto reference = sequential_logits(*stepwise, ids);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor all, batched->forward_all(ids, 0));
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = all.data<float>() + i * c.vocab_size;
    EXPECT_LT(relative_error(row, reference[i].data(), c.vocab_size), 1e-5) << "position " << i;
    for (int v = 0; v < c.vocab_size; ++v) ASSERT_TRUE(std::isfinite(row[v]));
  }
}

TEST(LlamaModel, RejectsPositionsOutsideTheContext) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  ModelOptions options;
  options.context = 16;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto model, LlamaModel::create(ckpt.config, ckpt.weights, options));
  std::vector<int32_t> ids(17, 5);
  auto too_long = model->forward(ids, 0);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  const int32_t one[1] = {5};
  EXPECT_FALSE(model->forward(one, 16).ok());
  EXPECT_TRUE(model->forward(one, 15).ok());
  const int32_t bad_token[1] = {512};
  EXPECT_FALSE(model->forward(bad_token, 0).ok());

  options.context = 100000;
  EXPECT_FALSE(LlamaModel::create(ckpt.config, ckpt.weights, options).ok());  // beyond max_seq_len 512
}

TEST(LlamaModel, HalfPrecisionWeightsStayClose) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto fp32, LlamaModel::create(ckpt.config, ckpt.weights, {}));
  std::vector<int32_t> ids = {1, 403, 407, 261, 378, 54};
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor ref, fp32->forward(ids, 0));
  const auto reference = to_host(ref);
  for (DataType dtype : {DataType::kBF16, DataType::kFP16}) {
    ModelOptions options;
    options.weight_dtype = dtype;
    KUIPER_ASSERT_OK_AND_ASSIGN(auto model, LlamaModel::create(ckpt.config, ckpt.weights, options));
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor got, model->forward(ids, 0));
    const auto host = to_host(got);
    // bf16 keeps 8 mantissa bits, fp16 11: errors of a few 1e-3 and 1e-4 respectively.
    const double tolerance = dtype == DataType::kBF16 ? 2e-2 : 3e-3;
    EXPECT_LT(relative_error(host.data(), reference.data(), host.size()), tolerance) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace kuiper
