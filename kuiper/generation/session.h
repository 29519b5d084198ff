// One growing token sequence on the engine (kuiper/engine): a prompt is appended to what the
// sequence holds and a reply generated after it, streaming text through a callback. Each call
// is one engine request over the whole sequence; the engine's prefix cache keeps the blocks
// the previous call computed, so a chat adds a turn without re-reading the conversation.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/engine/engine.h"

namespace kuiper {

struct GenerationOptions {
  int max_new_tokens = 256;
  // Tokens that end generation besides the engine's (the tokenizer's end tokens and BOS), e.g.
  // a chat template's end of turn.
  std::vector<int32_t> stop_tokens = {};
  bool ignore_eos = false;  // run max_new_tokens whatever is sampled
};

enum class StopReason { kStopToken, kMaxTokens, kContextFull, kCallback };
const char* stop_reason_name(StopReason reason);

struct GenerationStats {
  int prompt_tokens = 0;     // tokens appended by this call
  int cached_tokens = 0;     // of the whole sequence, served from the prefix cache
  int generated_tokens = 0;  // tokens sampled (stop token excluded)
  double prefill_seconds = 0;
  double decode_seconds = 0;
  StopReason stop_reason = StopReason::kMaxTokens;

  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

// Receives each piece of generated text as soon as it is whole UTF-8; returns false to stop.
using PieceCallback = std::function<bool(std::string_view piece)>;

class Session {
 public:
  // `engine` (which the session drives step by step, alone) must outlive the session;
  // `sampling` gives every reply's sampling (its seed advances with each reply).
  Session(Engine& engine, const SamplingParams& sampling);

  // Appends `prompt` to the sequence, then samples up to options.max_new_tokens, stopping at
  // an end token and at the end of the context. The sampled tokens join the sequence (a stop
  // token does not).
  StatusOr<GenerationStats> generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                                     const PieceCallback& on_piece);

  // The sequence, oldest first.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int position() const { return static_cast<int>(tokens_.size()); }
  int context() const { return engine_.context(); }
  // Forgets the sequence.
  void reset() { tokens_.clear(); }
  // Keeps the first `count` tokens and forgets the rest.
  void truncate(int count);

 private:
  Engine& engine_;
  SamplingParams sampling_;
  std::vector<int32_t> tokens_;
};

}  // namespace kuiper
