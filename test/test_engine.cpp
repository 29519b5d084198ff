// The multi-sequence engine on the CPU with the bundled stories260K (fp32) (its greedy text
// against llama2.c's is test_llama_model's, through Session): batch invariance (a request's tokens and logits do not depend on who else
// runs), prefix-cache hits against cold prefills, paged block accounting under random load and
// cancellations, pool exhaustion, stop strings and refusals.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kuiper/engine/engine.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

const std::string kStoriesModel = "models/stories260K/stories260K.bin";
const std::string kStoriesTokenizer = "models/stories260K/tok512.model";

struct Stories {
  Checkpoint checkpoint;
  std::unique_ptr<Tokenizer> tokenizer;
};

const Stories& stories() {
  static const Stories* s = [] {
    auto* out = new Stories;
    auto ckpt = load_checkpoint(test::source_path(kStoriesModel));
    CHECK(ckpt.ok()) << ckpt.status().to_string();
    out->checkpoint = std::move(*ckpt);
    auto tok = load_tokenizer(test::source_path(kStoriesTokenizer));
    CHECK(tok.ok()) << tok.status().to_string();
    out->tokenizer = std::move(*tok);
    return out;
  }();
  return *s;
}

std::unique_ptr<Engine> make_engine(EngineOptions options, int context = 0) {
  ModelOptions model;
  model.context = context;
  auto engine = Engine::create(stories().checkpoint.config, stories().checkpoint.weights, model,
                               *stories().tokenizer, options);
  CHECK(engine.ok()) << engine.status().to_string();
  return std::move(*engine);
}

// What one request produced.
struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int outputs_after_finish = 0;
  int cached_prompt_tokens = 0;
  std::map<int, std::vector<float>> logits;  // by the position they follow
};

OutputCallback collect(Result& r) {
  return [&r](const RequestOutput& out) {
    if (r.finish != FinishReason::kNone) ++r.outputs_after_finish;
    r.tokens.insert(r.tokens.end(), out.tokens.begin(), out.tokens.end());
    r.text += out.text;
    r.finish = out.finish;
    r.cached_prompt_tokens = out.cached_prompt_tokens;
  };
}

void run_until_idle(Engine& engine, int max_steps = 100000) {
  for (int i = 0; i < max_steps; ++i) {
    auto busy = engine.step();
    ASSERT_TRUE(busy.ok()) << busy.status().to_string();
    if (!*busy) return;
  }
  FAIL() << "the engine did not become idle";
}

std::vector<int32_t> encode(const std::string& text) {
  auto ids = stories().tokenizer->encode(text, {.add_bos = true});
  CHECK(ids.ok());
  return *ids;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  return p;
}

// max |a - b| / max |b|.
double max_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Prompts of many lengths (1 to ~120 tokens).
std::vector<std::vector<int32_t>> mixed_prompts(int count) {
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids = {1};
    const int length = 1 + static_cast<int>(rng() % 120);
    for (int j = 1; j < length; ++j) ids.push_back(3 + static_cast<int32_t>(rng() % 500));
    prompts.push_back(ids);
  }
  return prompts;
}

TEST(Engine, BatchInvariance) {
  const auto prompts = mixed_prompts(16);
  const std::vector<int32_t> target_prompt = encode("Once upon a time, there was a big dog");
  const auto observe = [](std::map<RequestId, Result*>& by_id) {
    return [&by_id](RequestId id, int pos, std::span<const float> logits) {
      if (by_id.count(id)) by_id[id]->logits[pos].assign(logits.begin(), logits.end());
    };
  };
  SamplingParams sampled;  // a seeded random request too: its draws follow its own seed only
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.seed = 1234;
  sampled.max_tokens = 40;

  // Alone.
  std::map<RequestId, Result*> alone_ids;
  Result alone_greedy, alone_sampled;
  {
    EngineOptions options{.max_seqs = 16, .max_step_rows = 48};
    options.observe_logits = observe(alone_ids);
    auto engine = make_engine(options);
    KUIPER_ASSERT_OK_AND_ASSIGN(RequestId a, engine->submit(target_prompt, greedy(60), collect(alone_greedy)));
    alone_ids[a] = &alone_greedy;
    run_until_idle(*engine);
    KUIPER_ASSERT_OK_AND_ASSIGN(RequestId b, engine->submit(prompts[3], sampled, collect(alone_sampled)));
    alone_ids[b] = &alone_sampled;
    run_until_idle(*engine);
  }
  // In a batch of 16: eight others first, the two joining mid-way among seven more.
  std::map<RequestId, Result*> batch_ids;
  Result batch_greedy, batch_sampled;
  std::vector<Result> others(16);
  {
    EngineOptions options{.max_seqs = 16, .max_step_rows = 48};
    options.observe_logits = observe(batch_ids);
    auto engine = make_engine(options);
    std::mt19937 rng(3);
    for (int i = 0; i < 8; ++i) {
      SamplingParams p = greedy(10 + static_cast<int>(rng() % 50));
      ASSERT_TRUE(engine->submit(prompts[i], p, collect(others[i])).ok());
    }
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->step().ok());
    KUIPER_ASSERT_OK_AND_ASSIGN(RequestId a, engine->submit(target_prompt, greedy(60), collect(batch_greedy)));
    batch_ids[a] = &batch_greedy;
    for (int i = 8; i < 12; ++i) ASSERT_TRUE(engine->submit(prompts[i], greedy(30), collect(others[i])).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->step().ok());
    KUIPER_ASSERT_OK_AND_ASSIGN(RequestId b, engine->submit(prompts[3], sampled, collect(batch_sampled)));
    batch_ids[b] = &batch_sampled;
    for (int i = 12; i < 15; ++i) ASSERT_TRUE(engine->submit(prompts[i], greedy(45), collect(others[i])).ok());
    EXPECT_GE(engine->metrics().running + engine->metrics().waiting, 15);
    run_until_idle(*engine);
  }
  ASSERT_FALSE(alone_greedy.tokens.empty());
  EXPECT_EQ(batch_greedy.tokens, alone_greedy.tokens);
  EXPECT_EQ(batch_greedy.text, alone_greedy.text);
  EXPECT_EQ(batch_sampled.tokens, alone_sampled.tokens);
  for (const Result* r : {&alone_greedy, &alone_sampled}) {
    const Result* b = r == &alone_greedy ? &batch_greedy : &batch_sampled;
    ASSERT_EQ(r->logits.size(), b->logits.size());
    double worst = 0;
    for (const auto& [pos, logits] : r->logits) worst = std::max(worst, max_relative(b->logits.at(pos), logits));
    EXPECT_LE(worst, 1e-5);
    std::printf("batch of 16 vs alone: %zu positions, max |diff| / max |logit| = %.3g\n", r->logits.size(), worst);
  }
}

TEST(Engine, AllGreedyStepsPickOnTheDeviceTheTokensTheSamplerPicks) {
  // Without a logits observer and with every sequence greedy, a step's tokens are chosen by the
  // argmax kernel and only they reach the host; with an observer the full logits come back and
  // each sequence's sampler chooses. Both must give the same text.
  const auto prompts = mixed_prompts(8);
  const auto run = [&](bool observed) {
    EngineOptions options{.max_seqs = 8, .max_step_rows = 64};
    if (observed) options.observe_logits = [](RequestId, int, std::span<const float>) {};
    auto engine = make_engine(options);
    std::vector<Result> results(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE(engine->submit(prompts[i], greedy(24 + static_cast<int>(i)), collect(results[i])).ok());
    }
    run_until_idle(*engine);
    return results;
  };
  const std::vector<Result> on_device = run(false), on_host = run(true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(on_device[i].finish, FinishReason::kLength) << i;
    EXPECT_EQ(on_device[i].tokens.size(), 24 + i);
    EXPECT_EQ(on_device[i].tokens, on_host[i].tokens) << i;
  }
}

TEST(Engine, PrefixCacheHitGivesTheColdLogits) {
  const std::vector<int32_t> system = mixed_prompts(1)[0];  // a shared "system prompt"
  std::vector<int32_t> longer = system;
  for (int i = 0; i < 9; ++i) longer.push_back(40 + i);
  const auto first_logits = [&](bool prefix_cache, Result& warm_up, Result& r) {
    EngineOptions options{.max_seqs = 4, .max_step_rows = 64, .prefix_cache = prefix_cache};
    std::vector<float>* first = nullptr;
    std::vector<float> captured;
    options.observe_logits = [&](RequestId, int pos, std::span<const float> logits) {
      if (pos == static_cast<int>(longer.size()) - 1 && first == nullptr) {
        captured.assign(logits.begin(), logits.end());
        first = &captured;
      }
    };
    auto engine = make_engine(options);
    EXPECT_TRUE(engine->submit(system, greedy(5), collect(warm_up)).ok());
    run_until_idle(*engine);
    EXPECT_TRUE(engine->submit(longer, greedy(20), collect(r)).ok());
    run_until_idle(*engine);
    EXPECT_EQ(engine->metrics().kv_blocks_used, 0);
    return captured;
  };
  Result warm_cold, cold, warm_hot, hot;
  const auto cold_logits = first_logits(false, warm_cold, cold);
  const auto hot_logits = first_logits(true, warm_hot, hot);
  EXPECT_EQ(cold.cached_prompt_tokens, 0);
  EXPECT_EQ(hot.cached_prompt_tokens, static_cast<int>(system.size()) / 16 * 16);
  ASSERT_GE(hot.cached_prompt_tokens, 16);
  ASSERT_FALSE(cold_logits.empty());
  EXPECT_LE(max_relative(hot_logits, cold_logits), 1e-5);
  EXPECT_EQ(hot.tokens, cold.tokens);
}

TEST(Engine, BlocksComeBackAfterRandomRequestsAndCancellations) {
  // 12 blocks of 16 positions: the pool is often full, so requests also wait.
  auto engine = make_engine({.max_seqs = 6, .max_step_rows = 40, .kv_blocks = 12, .max_waiting = 2000}, 128);
  std::mt19937 rng(11);
  constexpr int kRequests = 1000;
  std::vector<Result> results(kRequests);
  std::vector<RequestId> ids;
  int submitted = 0, saw_waiting = 0;
  const std::vector<int32_t> shared_prefix = mixed_prompts(2)[1];
  while (submitted < kRequests || engine->metrics().running + engine->metrics().waiting > 0) {
    for (int burst = static_cast<int>(rng() % 4); burst > 0 && submitted < kRequests; --burst) {
      std::vector<int32_t> prompt;
      if (rng() % 3 == 0) prompt.assign(shared_prefix.begin(), shared_prefix.begin() + std::min<size_t>(shared_prefix.size(), 36));
      else prompt.push_back(1);
      for (int n = static_cast<int>(rng() % 24); n > 0; --n) prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
      SamplingParams p;
      p.temperature = (rng() % 2) ? 0.f : 1.f;
      p.seed = rng();
      p.max_tokens = 1 + static_cast<int>(rng() % 16);
      KUIPER_ASSERT_OK_AND_ASSIGN(RequestId id, engine->submit(prompt, p, collect(results[submitted])));
      ids.push_back(id);
      ++submitted;
    }
    if (rng() % 5 == 0 && !ids.empty()) engine->cancel(ids[rng() % ids.size()]);
    const EngineMetrics m = engine->metrics();
    ASSERT_LE(m.kv_blocks_used, m.kv_blocks_total);
    ASSERT_LE(m.running, 6);
    saw_waiting += m.waiting > 0;
    KUIPER_ASSERT_OK_AND_ASSIGN(bool busy, engine->step());
    (void)busy;
  }
  int cancelled = 0;
  for (const Result& r : results) {
    ASSERT_NE(r.finish, FinishReason::kNone);
    ASSERT_NE(r.finish, FinishReason::kError);
    EXPECT_EQ(r.outputs_after_finish, 0);
    cancelled += r.finish == FinishReason::kCancelled;
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.kv_blocks_free, m.kv_blocks_total);
  EXPECT_EQ(m.requests_finished + m.requests_cancelled, static_cast<uint64_t>(kRequests));
  EXPECT_EQ(m.requests_cancelled, static_cast<uint64_t>(cancelled));
  EXPECT_GT(cancelled, 0);
  EXPECT_GT(saw_waiting, 0);
  EXPECT_GT(m.prompt_tokens_cached, 0u);
}

TEST(Engine, FullPoolQueuesAndAnImpossibleRequestIsRefused) {
  // 8 blocks of 16: a request of 40 prompt tokens + 60 new needs 7 of them.
  auto engine = make_engine({.max_seqs = 4, .max_step_rows = 64, .kv_blocks = 8}, 256);
  std::vector<Result> results(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt = mixed_prompts(3 + i).back();
    prompt.resize(40, 5);
    ASSERT_TRUE(engine->submit(prompt, greedy(60), collect(results[i])).ok());
  }
  ASSERT_TRUE(engine->step().ok());
  EXPECT_EQ(engine->metrics().running, 1);
  EXPECT_EQ(engine->metrics().waiting, 2);
  run_until_idle(*engine);
  for (const Result& r : results) EXPECT_NE(r.finish, FinishReason::kError);
  auto too_big = engine->submit(std::vector<int32_t>(100, 5), greedy(100), [](const RequestOutput&) {});
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("the pool holds 8"), std::string::npos) << too_big.status().message();
  auto too_long = engine->submit(std::vector<int32_t>(256, 5), greedy(1), [](const RequestOutput&) {});
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().message(), "prompt is 256 tokens, the context holds 256");
  EXPECT_FALSE(engine->submit({}, greedy(1), [](const RequestOutput&) {}).ok());
  SamplingParams bad = greedy(1);
  bad.top_p = 0;
  EXPECT_FALSE(engine->submit({1}, bad, [](const RequestOutput&) {}).ok());
}

TEST(Engine, StopStringEndsTheTextBeforeIt) {
  const auto prompt = encode("Once upon a time");
  Result full;
  {
    auto engine = make_engine({.max_seqs = 2});
    ASSERT_TRUE(engine->submit(prompt, greedy(80), collect(full)).ok());
    run_until_idle(*engine);
  }
  // A stop string from the middle of the greedy text: the output is the text before its first
  // occurrence.
  const std::string stop = full.text.substr(full.text.size() / 2, 7);
  const std::string expected = full.text.substr(0, full.text.find(stop));
  SamplingParams p = greedy(80);
  p.stop = {"never appears in it", stop};
  Result stopped;
  auto engine = make_engine({.max_seqs = 2});
  ASSERT_TRUE(engine->submit(prompt, p, collect(stopped)).ok());
  run_until_idle(*engine);
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.text, expected);
}

TEST(Engine, CancelAWaitingAndARunningRequest) {
  auto engine = make_engine({.max_seqs = 1});
  Result running, waiting;
  KUIPER_ASSERT_OK_AND_ASSIGN(RequestId a, engine->submit(encode("Once"), greedy(100), collect(running)));
  KUIPER_ASSERT_OK_AND_ASSIGN(RequestId b, engine->submit(encode("Once"), greedy(100), collect(waiting)));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->step().ok());
  engine->cancel(a);
  engine->cancel(b);
  run_until_idle(*engine);
  EXPECT_EQ(running.finish, FinishReason::kCancelled);
  EXPECT_EQ(waiting.finish, FinishReason::kCancelled);
  EXPECT_TRUE(waiting.tokens.empty());
  EXPECT_EQ(engine->metrics().kv_blocks_used, 0);
  EXPECT_EQ(engine->metrics().requests_cancelled, 2u);
}

TEST(Engine, RunServesRequestsFromOtherThreadsUntilStopped) {
  auto engine = make_engine({.max_seqs = 4});
  std::thread loop([&] { EXPECT_TRUE(engine->run().ok()); });
  std::mutex mu;
  std::condition_variable done;
  int finished = 0;
  std::vector<Result> results(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(engine->submit(encode("Once upon a time"), greedy(10 + i), [&, i](const RequestOutput& out) {
      collect(results[i])(out);
      if (out.finish == FinishReason::kNone) return;
      std::lock_guard lock(mu);
      ++finished;
      done.notify_all();
    }).ok());
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == 3; }));
  }
  // A request still running when the engine stops ends cancelled.
  Result long_one;
  ASSERT_TRUE(engine->submit(encode("Once"), greedy(400), collect(long_one)).ok());
  engine->stop();
  loop.join();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(static_cast<int>(results[i].tokens.size()), 10 + i);
    EXPECT_EQ(results[i].finish, FinishReason::kLength);
  }
  EXPECT_NE(long_one.finish, FinishReason::kNone);
  EXPECT_EQ(engine->metrics().kv_blocks_used, 0);
}

}  // namespace
}  // namespace kuiper
