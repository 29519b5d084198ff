#include "test/two_models.h"

#include <algorithm>
#include <cmath>

#include "kuiper/checkpoint/random_checkpoint.h"
#include "test/test_util.h"

namespace kuiper::test {
namespace {

struct Shape {
  LlamaConfig config;
  int context;
};

// Different widths, head layouts and contexts, so that scratch sized for one cannot serve the
// other unnoticed.
std::vector<Shape> shapes() {
  LlamaConfig a;
  a.dim = 64; a.hidden_dim = 160; a.n_layers = 2; a.n_heads = 4; a.n_kv_heads = 2;
  a.vocab_size = 96; a.max_seq_len = 256;
  LlamaConfig b;
  b.dim = 128; b.hidden_dim = 352; b.n_layers = 3; b.n_heads = 8; b.n_kv_heads = 8;
  b.vocab_size = 130; b.max_seq_len = 512;
  return {{a, 200}, {b, 512}};
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding of one model; `turn` runs before each of its steps (the other model's step).
std::vector<std::vector<float>> decode(LlamaModel& model, int steps, int vocab) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 7; ++i) prompt.push_back((i * 37 + 5) % vocab);
  auto logits = model.forward(prompt, 0);
  CHECK(logits.ok()) << logits.status().to_string();
  std::vector<std::vector<float>> out{to_host(*logits)};
  for (int s = 0; s < steps; ++s) {
    const int32_t next = argmax(out.back());
    logits = model.forward(std::span(&next, 1), static_cast<int>(prompt.size()) + s);
    CHECK(logits.ok()) << logits.status().to_string();
    out.push_back(to_host(*logits));
  }
  return out;
}

}  // namespace

TwoModelsResult run_two_models_interleaved(const ModelOptions& options, int steps) {
  const std::vector<Shape> s = shapes();
  std::vector<Checkpoint> checkpoints;
  for (size_t i = 0; i < s.size(); ++i) {
    auto ckpt = make_random_checkpoint(s[i].config, 100 + i);
    CHECK(ckpt.ok()) << ckpt.status().to_string();
    checkpoints.push_back(std::move(*ckpt));
  }
  const auto make = [&](size_t i) {
    ModelOptions o = options;
    o.context = s[i].context;
    auto model = LlamaModel::create(checkpoints[i].config, checkpoints[i].weights, o);
    CHECK(model.ok()) << model.status().to_string();
    return std::move(*model);
  };

  // Alone: each model made, run and destroyed before the other exists.
  std::vector<std::vector<std::vector<float>>> alone;
  for (size_t i = 0; i < s.size(); ++i) {
    auto model = make(i);
    alone.push_back(decode(*model, steps, s[i].config.vocab_size));
  }

  // Together: both alive, prefilled one after the other, then decoding token by token in turn.
  auto first = make(0), second = make(1);
  std::vector<int32_t> tokens[2];
  std::vector<std::vector<float>> together[2];
  LlamaModel* models[2] = {first.get(), second.get()};
  for (int m = 0; m < 2; ++m) {
    for (int i = 0; i < 7; ++i) tokens[m].push_back((i * 37 + 5) % s[m].config.vocab_size);
    auto logits = models[m]->forward(tokens[m], 0);
    CHECK(logits.ok()) << logits.status().to_string();
    together[m].push_back(to_host(*logits));
  }
  for (int step = 0; step < steps; ++step) {
    for (int m = 0; m < 2; ++m) {
      const int32_t next = argmax(together[m].back());
      auto logits = models[m]->forward(std::span(&next, 1), 7 + step);
      CHECK(logits.ok()) << logits.status().to_string();
      together[m].push_back(to_host(*logits));
    }
  }

  TwoModelsResult result;
  result.steps = steps;
  for (int m = 0; m < 2; ++m) {
    CHECK_EQ(alone[m].size(), together[m].size());
    for (size_t t = 0; t < alone[m].size(); ++t) {
      for (size_t j = 0; j < alone[m][t].size(); ++j) {
        result.worst_difference = std::max<double>(result.worst_difference,
                                                   std::fabs(alone[m][t][j] - together[m][t][j]));
      }
    }
  }
  return result;
}

}  // namespace kuiper::test
