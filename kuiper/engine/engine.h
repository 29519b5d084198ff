// A multi-sequence inference engine: requests are queued, admitted first come first served
// while the paged KV cache has room, and advanced together one scheduler iteration at a time.
// Each iteration (step) runs one forward pass over rows of several sequences: one decode row
// for every running sequence plus prompt rows of sequences still prefilling (chunked prefill,
// so a long prompt holds running streams up for at most one chunk). Sequences join and leave
// between steps (continuous batching). The cache is a pool of fixed-size blocks; a sequence
// holds a block table, and full blocks are shared between requests with the same prompt prefix
// (prefix caching). Design notes: kuiper/engine/README.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/model/llama_weights.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper {

// Per-request sampling, as the OpenAI API names it.
struct SamplingParams {
  float temperature = 1.f;         // 0 = greedy
  float top_p = 1.f;               // 1 = off
  int top_k = 0;                   // 0 = off
  float min_p = 0.f;               // 0 = off; keeps tokens with p >= min_p * p(most likely)
  uint64_t seed = 0;
  float presence_penalty = 0.f;    // OpenAI semantics, over generated tokens
  float frequency_penalty = 0.f;
  float repetition_penalty = 1.f;  // CTRL/HF semantics, over prompt + generated tokens
  int max_tokens = 256;
  std::vector<std::string> stop = {};  // stop strings: output ends before the first match (not included)
  bool ignore_eos = false;         // keep going past the model's end tokens
  // Token ids that also end the request (not included in the output), e.g. a chat template's
  // end-of-turn token; ignored with ignore_eos.
  std::vector<int32_t> stop_token_ids = {};
};
// Checks ranges; the message names the field.
Status validate(const SamplingParams& params);

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

// Delivered to the request's callback after each engine step that produced something for it.
struct RequestOutput {
  std::vector<int32_t> tokens;  // tokens sampled this step
  std::string text;             // text that became final this step (whole UTF-8; text that may
                                // still turn out to be the start of a stop string is held back)
  FinishReason finish = FinishReason::kNone;  // set on the last output of the request
  Status error;                 // when finish == kError (e.g. non-finite logits)
  int prompt_tokens = 0;        // usage, valid on every output
  int cached_prompt_tokens = 0; // prompt tokens served from the prefix cache
  int completion_tokens = 0;
};
using RequestId = uint64_t;
// Called on the engine's thread; must not block for long and must not call back into the
// engine except cancel().
using OutputCallback = std::function<void(const RequestOutput&)>;

struct EngineOptions {
  int max_seqs = 16;        // running sequences
  int max_step_rows = 512;  // rows (tokens) per step, decode rows + prefill chunk rows
  int kv_block_size = 16;   // positions per KV block
  int kv_blocks = 0;        // 0: enough for max_seqs sequences of the full context
  bool prefix_cache = true;
  int max_waiting = 256;    // queued requests beyond which submit() refuses (resource_exhausted)
  // BOS also ends a request (unless ignore_eos): llama2.c's story models emit it where one story
  // ends and the next begins.
  bool stop_at_bos = true;
  // Optional, for tests and tools: called on the engine's thread with the logits each request's
  // next token is sampled from (before penalties), and the position they follow.
  std::function<void(RequestId, int position, std::span<const float> logits)> observe_logits = nullptr;
};

struct EngineMetrics {
  int running = 0, waiting = 0;
  uint64_t requests_finished = 0, requests_cancelled = 0;
  uint64_t prompt_tokens_prefilled = 0, prompt_tokens_cached = 0, tokens_generated = 0;
  int kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_total = 0;
  double generated_tokens_per_second = 0;  // over the last few seconds
};

class EngineState;  // engine.cpp: the scheduler, block manager and model behind the API

class Engine {
 public:
  // Builds the model (on options.device, with a paged cache of engine_options.kv_blocks blocks)
  // from `config` and `weights`; `tokenizer` must outlive the engine (stop strings and text).
  static StatusOr<std::unique_ptr<Engine>> create(const LlamaConfig& config, const LlamaWeights& weights,
                                                  const ModelOptions& model_options, const Tokenizer& tokenizer,
                                                  const EngineOptions& engine_options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Errors: empty prompt, prompt + 1 longer than the context ("prompt is N tokens,
  // the context holds M"), a request that could never fit in the KV pool, invalid params
  // (invalid_argument / out_of_range); queue full (resource_exhausted).
  StatusOr<RequestId> submit(std::vector<int32_t> prompt, const SamplingParams& params, OutputCallback on_output);
  void cancel(RequestId id);      // thread-safe; the request ends with kCancelled, blocks freed
  EngineMetrics metrics() const;  // thread-safe

  // Single-threaded use (llama_infer, tests): one scheduler iteration; false when idle.
  StatusOr<bool> step();
  // Server use: runs steps on the calling thread until stop(); sleeps while idle.
  Status run();
  void stop();  // thread-safe; run() returns after cancelling what runs
  const Tokenizer& tokenizer() const;
  int context() const;
  // The model the engine runs (for figures such as weight_bytes; not for forward calls).
  const LlamaModel& model() const;

 private:
  explicit Engine(std::unique_ptr<EngineState> state);
  std::unique_ptr<EngineState> state_;
};

}  // namespace kuiper
