// The whole model on the GPU against the CPU path (an independent set of kernels): logits,
// greedy text, and the recorded decode step against eager decoding. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <vector>

#include "kuiper/generation/session.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "test/test_util.h"
#include "test/two_models.h"

namespace kuiper {
namespace {

using test::to_host;

using test::relative_error;

const std::string kStoriesModel = "models/stories260K/stories260K.bin";

class CudaModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  }
};

ModelOptions model_options(DeviceType device, DataType dtype, bool graph = true) {
  ModelOptions options;
  options.device = device;
  options.weight_dtype = dtype;
  options.use_cuda_graph = graph;
  return options;
}

std::unique_ptr<LlamaModel> make_model(const Checkpoint& ckpt, DeviceType device, DataType dtype,
                                       bool graph = true) {
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, model_options(device, dtype, graph));
  CHECK(model.ok()) << model.status().to_string();
  return std::move(model).value();
}

// Prefill `prompt`, then decode `steps` forced tokens; the logits after each call.
std::vector<std::vector<float>> run(LlamaModel& model, const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& forced) {
  std::vector<std::vector<float>> out;
  auto logits = model.forward(prompt, 0);
  CHECK(logits.ok()) << logits.status().to_string();
  out.push_back(to_host(*logits));
  int pos = static_cast<int>(prompt.size());
  for (int32_t t : forced) {
    const int32_t one[1] = {t};
    logits = model.forward(one, pos++);
    CHECK(logits.ok()) << logits.status().to_string();
    out.push_back(to_host(*logits));
  }
  return out;
}

void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, relative_error(got[i].data(), ref[i].data(), ref[i].size()));
  EXPECT_LT(worst, tolerance) << what;
  std::printf("%s: worst relative logit error %.3g (tolerance %.g)\n", what.c_str(), worst, tolerance);
}

TEST_F(CudaModel, StoriesLogitsMatchCpu) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 54, 71, 260, 300, 9};
  // Past 256 positions: decode steps of two reaches (op::decode_attention_reach).
  std::vector<int32_t> forced;
  for (int i = 0; i < 260; ++i) forced.push_back((i * 37 + 11) % 512);
  auto cpu = make_model(ckpt, DeviceType::kCPU, DataType::kFP32);
  const auto reference = run(*cpu, prompt, forced);
  auto fp32 = make_model(ckpt, DeviceType::kCUDA, DataType::kFP32);
  expect_close(run(*fp32, prompt, forced), reference, 1e-4, "cuda fp32");
  auto bf16 = make_model(ckpt, DeviceType::kCUDA, DataType::kBF16);
  expect_close(run(*bf16, prompt, forced), reference, 2e-2, "cuda bf16");
  auto fp16 = make_model(ckpt, DeviceType::kCUDA, DataType::kFP16);
  expect_close(run(*fp16, prompt, forced), reference, 1e-2, "cuda fp16");
}

TEST_F(CudaModel, GqaRandomModelLongPromptMatchesCpu) {
  LlamaConfig c;
  c.dim = 256; c.hidden_dim = 688; c.n_layers = 2; c.n_heads = 8; c.n_kv_heads = 2;
  c.vocab_size = 1003; c.max_seq_len = 1200; c.shared_classifier = false; c.rope_theta = 500000.f;
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, make_random_checkpoint(c, 11));
  std::vector<int32_t> prompt;
  for (int i = 0; i < 700; ++i) prompt.push_back((i * 131 + 7) % c.vocab_size);  // several chunks
  const std::vector<int32_t> forced = {5, 900, 17, 3, 1002};
  auto cpu = make_model(ckpt, DeviceType::kCPU, DataType::kFP32);
  const auto reference = run(*cpu, prompt, forced);
  auto fp32 = make_model(ckpt, DeviceType::kCUDA, DataType::kFP32);
  expect_close(run(*fp32, prompt, forced), reference, 1e-4, "gqa fp32");
  auto bf16 = make_model(ckpt, DeviceType::kCUDA, DataType::kBF16);
  expect_close(run(*bf16, prompt, forced), reference, 2e-2, "gqa bf16");
}

TEST_F(CudaModel, GraphReplayIsBitIdenticalToEagerDecode) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  const std::vector<int32_t> prompt = {1, 403, 407};
  // Past 256 positions: steps of two reaches (op::decode_attention_reach), one recording each.
  std::vector<int32_t> forced;
  for (int i = 0; i < 300; ++i) forced.push_back((i * 53 + 5) % 512);
  for (DataType dtype : {DataType::kFP32, DataType::kBF16}) {
    auto eager = make_model(ckpt, DeviceType::kCUDA, dtype, /*graph=*/false);
    auto graph = make_model(ckpt, DeviceType::kCUDA, dtype, /*graph=*/true);
    const auto a = run(*eager, prompt, forced);
    const auto b = run(*graph, prompt, forced);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i], b[i]) << "step " << i << " " << dtype_name(dtype);
    }
  }
}

TEST_F(CudaModel, GreedyStoryEqualsCpu) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer->encode("Once upon a time"));
  std::string texts[2];
  for (int d = 0; d < 2; ++d) {
    const ModelOptions options = model_options(d == 0 ? DeviceType::kCPU : DeviceType::kCUDA, DataType::kFP32);
    KUIPER_ASSERT_OK_AND_ASSIGN(auto engine, Engine::create(ckpt.config, ckpt.weights, options, *tokenizer, {.max_seqs = 1}));
    Session session(*engine, {.temperature = 0.f});
    KUIPER_ASSERT_OK(session.generate(ids, {.max_new_tokens = 200, .ignore_eos = true}, [&](std::string_view piece) {
      texts[d] += piece;
      return true;
    }).status());
  }
  EXPECT_GT(texts[0].size(), 400u);
  EXPECT_EQ(texts[1], texts[0]);
}

// The engine on CUDA: a greedy request alone (one sequence: the fused decode GEMVs and the CUDA
// graph) and among batch - 1 others joining at different times (GEMM for the batch, paged
// attention). fp32: the same tokens and logits within 1e-4; bf16: the bound is printed.
void expect_batch_invariance(int batch) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path(kStoriesModel)));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto target, tokenizer->encode("Once upon a time, there was a big dog", {.add_bos = true}));
  for (DataType dtype : {DataType::kFP32, DataType::kBF16}) {
    std::vector<int32_t> tokens[2];
    std::map<int, std::vector<float>> logits[2];
    for (int batched = 0; batched < 2; ++batched) {
      RequestId target_id = 0;
      EngineOptions options{.max_seqs = batch, .max_step_rows = 48};
      options.observe_logits = [&](RequestId id, int pos, std::span<const float> l) {
        if (id == target_id) logits[batched][pos].assign(l.begin(), l.end());
      };
      KUIPER_ASSERT_OK_AND_ASSIGN(auto engine, Engine::create(ckpt.config, ckpt.weights,
                                                              model_options(DeviceType::kCUDA, dtype), *tokenizer, options));
      SamplingParams greedy{.temperature = 0.f, .max_tokens = 50, .ignore_eos = true};
      const auto other = [&](int i) {
        std::vector<int32_t> prompt = {1};
        for (int j = 0; j < 7 + 13 * i; ++j) prompt.push_back(3 + (i * 31 + j * 7) % 500);
        ASSERT_TRUE(engine->submit(prompt, greedy, [](const RequestOutput&) {}).ok());
      };
      const int others = batch - 1, first_wave = batch / 2;
      if (batched) for (int i = 0; i < first_wave; ++i) other(i);
      for (int i = 0; i < 3 * batched; ++i) ASSERT_TRUE(engine->step().ok());
      KUIPER_ASSERT_OK_AND_ASSIGN(target_id, engine->submit(target, greedy, [&](const RequestOutput& out) {
        tokens[batched].insert(tokens[batched].end(), out.tokens.begin(), out.tokens.end());
      }));
      if (batched) for (int i = first_wave; i < others; ++i) other(i);
      for (;;) {
        KUIPER_ASSERT_OK_AND_ASSIGN(bool busy, engine->step());
        if (!busy) break;
      }
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    double worst = 0;
    for (const auto& [pos, alone] : logits[0]) {
      double diff = 0, scale = 0;
      for (size_t i = 0; i < alone.size(); ++i) {
        diff = std::max(diff, std::fabs(double{logits[1][pos][i]} - alone[i]));
        scale = std::max(scale, std::fabs(double{alone[i]}));
      }
      worst = std::max(worst, diff / scale);
    }
    const size_t agree = std::mismatch(tokens[0].begin(), tokens[0].end(), tokens[1].begin(), tokens[1].end()).first -
                         tokens[0].begin();
    std::printf("cuda %s engine, batch of %d vs alone: %zu of %zu greedy tokens agree, max |diff| / max |logit| %.3g\n",
                std::string(dtype_name(dtype)).c_str(), batch, agree, tokens[0].size(), worst);
    if (dtype == DataType::kFP32) {
      EXPECT_EQ(tokens[1], tokens[0]);
      EXPECT_LT(worst, 1e-4);
    } else {
      EXPECT_LT(worst, 5e-2);
    }
  }
}

TEST_F(CudaModel, EngineBatchOfEightAgainstAlone) { expect_batch_invariance(8); }
TEST_F(CudaModel, EngineBatchOfThirtyTwoAgainstAlone) { expect_batch_invariance(32); }

TEST_F(CudaModel, RefusesAModelThatCannotFit) {
  LlamaConfig c;
  c.dim = 8192; c.hidden_dim = 28672; c.n_layers = 200; c.n_heads = 64; c.n_kv_heads = 8;
  c.vocab_size = 128256; c.max_seq_len = 1 << 20;
  // Only the config matters: the check runs before any weight is touched.
  Checkpoint ckpt{c, {}, "test", "<none>", {}};
  ckpt.weights.layers.resize(1);
  std::mt19937 rng(1);
  ckpt.weights.layers[0].wq.values = test::random_tensor({1, 1}, rng);
  ModelOptions options;
  options.device = DeviceType::kCUDA;
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, options);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kResourceExhausted) << model.status().to_string();
}

// Two GPU models alive at once, each with its own execution context (scratch, cuBLAS handle,
// recorded decode graph), decoding in turn: the same kernels on the same inputs, so each must
// give bit-identical logits to the model run alone.
TEST_F(CudaModel, TwoModelsInterleavedEqualEachAlone) {
  for (DataType dtype : {DataType::kFP32, DataType::kBF16}) {
    ModelOptions options;
    options.device = DeviceType::kCUDA;
    options.weight_dtype = dtype;
    const test::TwoModelsResult r = test::run_two_models_interleaved(options, 24);
    EXPECT_EQ(r.worst_difference, 0.0) << dtype_name(dtype) << ", after " << r.steps << " steps";
  }
}

// The families' extras (projection biases, per-head norms, own head width) run as separate
// kernels on the GPU too: CUDA against the CPU model on the HF fixtures.
TEST_F(CudaModel, FamiliesMatchCpu) {
  for (const char* dir : {"test/data/hf/qwen2_tiny", "test/data/hf/qwen3_tiny", "test/data/hf/llama_bias_tiny"}) {
    auto ckpt = load_checkpoint(test::source_path(dir));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back((i * 29 + 3) % ckpt->config.vocab_size);
    const Tensor cpu = make_model(*ckpt, DeviceType::kCPU, DataType::kFP32)->forward_all(ids, 0).value();
    for (auto [dtype, bound] : {std::pair{DataType::kFP32, 1e-4}, {DataType::kBF16, 2e-2}}) {
      const Tensor gpu = make_model(*ckpt, DeviceType::kCUDA, dtype)->forward_all(ids, 0).value();
      const double error = relative_error(gpu.data<float>(), cpu.data<float>(), cpu.numel());
      std::printf("%s %s: relative logit error CUDA vs CPU %.3g (bound %g)\n", dir, std::string(dtype_name(dtype)).c_str(), error, bound);
      EXPECT_LT(error, bound) << dir << " " << dtype_name(dtype);
    }
    // Decode, recorded as a CUDA graph, token by token.
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 8), forced(ids.begin() + 8, ids.begin() + 24);
    auto cpu_model = make_model(*ckpt, DeviceType::kCPU, DataType::kFP32);
    auto gpu_model = make_model(*ckpt, DeviceType::kCUDA, DataType::kFP32);
    const auto want = run(*cpu_model, prompt, forced), got = run(*gpu_model, prompt, forced);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(relative_error(got[i].data(), want[i].data(), want[i].size()), 1e-4) << dir << " decode step " << i;
    }
  }
}

}  // namespace
}  // namespace kuiper
