// Tensor parallelism on the CPU (model/parallel_plan.h): a model split 2 and 4 ways, its ranks
// threads of this process meeting in the in-process communicator, gives the logits of the whole
// model (the one-rank model, itself tested against llama2.c and the NumPy reference) within
// 1e-5 relative in fp32: only the order of the sums differs.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/checkpoint/load_checkpoint.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/parallel/communicator.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

constexpr double kTolerance = 1e-5;

StatusOr<std::unique_ptr<LlamaModel>> split_model(const Checkpoint& c, int ranks, int kv_block_size = 0) {
  ModelOptions options;
  options.tensor_parallel = ranks;
  options.context = 64;
  options.max_batch = 16;
  if (kv_block_size > 0) {
    options.kv_block_size = kv_block_size;
    options.kv_slots = 128;
    options.max_sequences = 4;
  }
  return LlamaModel::create(c.config, c.weights, options);
}

double error_of(const Tensor& logits, const Tensor& reference) {
  const std::vector<float> a = test::to_host(logits), b = test::to_host(reference);
  EXPECT_EQ(a.size(), b.size());
  return test::relative_error(a.data(), b.data(), b.size());
}

int argmax(const Tensor& logits) {
  const std::vector<float> v = test::to_host(logits);
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// A prompt, then greedy decoding: every step's logits against the whole model's.
void expect_same_generation(const Checkpoint& c, int ranks) {
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> whole, split_model(c, 1));
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> split, split_model(c, ranks));
  EXPECT_EQ(split->ranks(), ranks);
  EXPECT_EQ(split->config().n_heads, c.config.n_heads);  // the whole model's shape, not a rank's
  std::vector<int32_t> tokens = {1, 7, 42, 3, 100, 5};
  int pos = 0;
  for (int step = 0; step < 12; ++step) {
    const std::span<const int32_t> run = step == 0 ? std::span<const int32_t>(tokens)
                                                   : std::span<const int32_t>(tokens).last(1);
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor expected, whole->forward(run, pos));
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor got, split->forward(run, pos));
    EXPECT_LE(error_of(got, expected), kTolerance) << ranks << " ranks, step " << step;
    const int next = argmax(expected);
    ASSERT_EQ(argmax(got), next) << ranks << " ranks, step " << step;
    pos += static_cast<int>(run.size());
    tokens.push_back(next);
  }
}

Checkpoint stories260k() {
  auto c = load_checkpoint(test::source_path("models/stories260K/stories260K.bin"));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(c).value();
}

// Every switch the families use: GQA, all biases, per-head q/k norms, an untied classifier,
// and a vocabulary that does not divide by the ranks (kept whole on each).
Checkpoint every_switch() {
  LlamaConfig config = test::model_shape(64, 96, 2, 8, 2, 301, 64);
  config.shared_classifier = false;
  config.qkv_bias = config.output_bias = config.mlp_bias = config.qk_norm = true;
  auto made = make_random_checkpoint(config, 7);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  Checkpoint c = std::move(made).value();
  std::mt19937 rng(11);
  for (LlamaLayerWeights& l : c.weights.layers) {
    l.bq = test::random_tensor({config.q_dim()}, rng, -0.1f, 0.1f);
    l.bk = test::random_tensor({config.kv_dim()}, rng, -0.1f, 0.1f);
    l.bv = test::random_tensor({config.kv_dim()}, rng, -0.1f, 0.1f);
    l.bo = test::random_tensor({config.dim}, rng, -0.1f, 0.1f);
    l.b1 = test::random_tensor({config.hidden_dim}, rng, -0.1f, 0.1f);
    l.b2 = test::random_tensor({config.dim}, rng, -0.1f, 0.1f);
    l.b3 = test::random_tensor({config.hidden_dim}, rng, -0.1f, 0.1f);
    l.q_norm = test::random_tensor({config.head_dim()}, rng, 0.9f, 1.1f);
    l.k_norm = test::random_tensor({config.head_dim()}, rng, 0.9f, 1.1f);
  }
  return c;
}

TEST(TensorParallel, Stories260kSplitTwoAndFourWaysGeneratesAsTheWholeModel) {
  const Checkpoint c = stories260k();
  expect_same_generation(c, 2);
  expect_same_generation(c, 4);
}

TEST(TensorParallel, WeightBytesCountEveryRank) {
  const Checkpoint c = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> whole, split_model(c, 1));
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> split, split_model(c, 4));
  // The matrices and the classifier once, the norms and an embedding row on each rank.
  EXPECT_GE(split->weight_bytes(), whole->weight_bytes());
  EXPECT_LE(split->weight_bytes(), whole->weight_bytes() * 21 / 20);
}

TEST(TensorParallel, EveryFamilySwitchSplitsTwoWays) { expect_same_generation(every_switch(), 2); }

TEST(TensorParallel, AllPositionsLogitsAreGatheredInRowOrder) {
  const Checkpoint c = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> whole, split_model(c, 1));
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> split, split_model(c, 4));
  // More positions than max_batch: two chunks.
  std::vector<int32_t> tokens(37);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 1) % 512);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor expected, whole->forward_all(tokens, 0));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor got, split->forward_all(tokens, 0));
  EXPECT_LE(error_of(got, expected), kTolerance);
}

TEST(TensorParallel, PagedStepOfSeveralSequencesMatchesTheWholeModel) {
  const Checkpoint c = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> whole, split_model(c, 1, 4));
  for (int ranks : {2, 4}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> split, split_model(c, ranks, 4));
    // Sequence 0 prefills 6 tokens in blocks 3, 1; sequence 1 prefills 3 tokens in block 5.
    const std::vector<int32_t> tokens = {1, 9, 33, 2, 250, 17, 1, 400, 8};
    const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5, 0, 1, 2};
    const std::vector<int32_t> slots = {12, 13, 14, 15, 4, 5, 20, 21, 22};
    const std::vector<int32_t> row_sequence = {0, 0, 0, 0, 0, 0, 1, 1, 1};
    const std::vector<int32_t> tables = {3, 1, 5, 0};
    const std::vector<int32_t> logit_rows = {5, 8, 2};
    const StepBatch batch{tokens, positions, slots, row_sequence, tables, 2, logit_rows};
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor expected, whole->forward_step(batch));
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor got, split->forward_step(batch));
    ASSERT_EQ(got.dim(0), 3);
    EXPECT_LE(error_of(got, expected), kTolerance) << ranks << " ranks";
  }
}

// Six sequences through the engine (prefill, then batched decode steps), as
// test_cuda_tensor_parallel runs them on GPUs: each split model's greedy tokens are the whole
// model's, and its logits, handed to the host at each step, within fp32 rounding of them.
TEST(TensorParallel, EngineOfSixSequencesGeneratesAsTheWholeModel) {
  const Checkpoint c = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  const auto generate = [&](int ranks, bool logits) {
    ModelOptions model;
    model.tensor_parallel = ranks;
    return test::engine_greedy_run(c, model, *tokenizer, logits);
  };
  const auto whole = generate(1, false), whole_logits = generate(1, true);
  for (int ranks : {2, 4}) {
    const auto split = generate(ranks, false);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(whole.tokens[i].size(), 40u);
      EXPECT_EQ(split.tokens[i], whole.tokens[i]) << ranks << " ranks, sequence " << i;
    }
    EXPECT_LE(test::worst_engine_logit_error(generate(ranks, true), whole_logits), kTolerance) << ranks << " ranks";
  }
}

TEST(TensorParallel, Int8WeightsSplitOnGroupBoundaries) {
  const LlamaConfig config = test::model_shape(64, 128, 2, 4, 4, 256, 64);
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint fp32, make_random_checkpoint(config, 3));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint int8, convert_checkpoint(fp32, {DataType::kINT8, 32}));
  expect_same_generation(int8, 2);
}

// The NCCL versions whose symmetric kernels wait for their inputs, as NCCL's source has them:
// cudaGridDependencySynchronize in 2.27's symmetric primitives, in no symmetric kernel of 2.28.3,
// 2.28.9, 2.29.7 or 2.30.4, and at the top of every one from 2.30.7.
TEST(TensorParallel, NcclSymmetricKernelsWaitIn2_27AndFrom2_30_7) {
  for (int version : {22703, 22707, 23007, 23203}) EXPECT_TRUE(parallel::nccl_symmetric_kernels_wait(version)) << version;
  for (int version : {22600, 22800, 22803, 22809, 22907, 23004, 23006}) {
    EXPECT_FALSE(parallel::nccl_symmetric_kernels_wait(version)) << version;
  }
}

TEST(TensorParallel, RefusesSplitsThatDoNotDivide) {
  const Checkpoint c = stories260k();  // 8 heads, 4 KV heads, feed-forward 172
  auto three = split_model(c, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("8 query heads do not divide by 3"), std::string::npos)
      << three.status().to_string();
  auto eight = split_model(c, 8);
  ASSERT_FALSE(eight.ok());
  EXPECT_NE(eight.status().message().find("4 key/value heads do not divide by 8"), std::string::npos)
      << eight.status().to_string();
  // int8 groups of 4: w2's 172 columns split at column 86, inside a group.
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint int8, convert_checkpoint(c, {DataType::kINT8, 4}));
  auto grouped = split_model(int8, 2);
  ASSERT_FALSE(grouped.ok());
  EXPECT_NE(grouped.status().message().find("w2"), std::string::npos) << grouped.status().to_string();
}

}  // namespace
}  // namespace kuiper
