// Running a model over a growing token sequence: prefill a prompt in batched passes, then
// decode token by token, streaming text through a callback. A Session keeps its KV cache
// between calls, so a chat can add a turn without re-reading the conversation.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/model/llama_model.h"
#include "kuiper/sampler/sampler.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper {

struct GenerationOptions {
  int max_new_tokens = 256;
  // Tokens that end generation; empty = the tokenizer's eos_ids().
  std::vector<int32_t> stop_tokens;
};

enum class StopReason { kStopToken, kMaxTokens, kContextFull, kCallback };
const char* stop_reason_name(StopReason reason);

struct GenerationStats {
  int prompt_tokens = 0;     // tokens prefilled by this call
  int generated_tokens = 0;  // tokens sampled (stop token excluded)
  double prefill_seconds = 0;
  double decode_seconds = 0;
  StopReason stop_reason = StopReason::kMaxTokens;
  int32_t stop_token = -1;   // the stop token sampled, when stop_reason == kStopToken

  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

// Receives each piece of generated text as soon as it is whole UTF-8; returns false to stop.
using PieceCallback = std::function<bool(std::string_view piece)>;

class Session {
 public:
  Session(LlamaModel& model, const Tokenizer& tokenizer, Sampler& sampler);

  // Appends `prompt` to what the cache holds (prefilled in batched passes), then samples up to
  // options.max_new_tokens. Every sampled token enters the cache, except a stop token and a
  // token sampled when the context is already full.
  StatusOr<GenerationStats> generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                                     const PieceCallback& on_piece);

  // Appends tokens to the cache without sampling; returns the logits after the last one.
  StatusOr<Tensor> prefill(std::span<const int32_t> tokens);

  // Tokens held in the cache, oldest first.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int position() const { return static_cast<int>(tokens_.size()); }
  int context() const { return model_.context(); }
  // Forgets the cache contents (they are overwritten by the next prefill).
  void reset() { tokens_.clear(); }
  // Keeps the first `count` tokens of the cache and forgets the rest.
  void truncate(int count);

 private:
  StatusOr<int32_t> next_token(const Tensor& logits);
  Status non_finite_logits() const;

  LlamaModel& model_;
  const Tokenizer& tokenizer_;
  Sampler& sampler_;
  std::vector<int32_t> tokens_;
  std::vector<float> host_logits_;  // reused for every sampled token
  Tensor argmax_out_;               // device int32 [1] for greedy decoding on the GPU
};

}  // namespace kuiper
