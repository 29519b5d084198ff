#include "kuiper/generation/session.h"

#include <algorithm>
#include <chrono>

namespace kuiper {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kStopToken: return "end of text";
    case StopReason::kMaxTokens: return "token limit";
    case StopReason::kContextFull: return "context full";
    case StopReason::kCallback: return "stopped";
  }
  return "?";
}

double GenerationStats::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0;
}

double GenerationStats::decode_tokens_per_second() const {
  // The first token comes with the prefill.
  return decode_seconds > 0 ? std::max(0, generated_tokens - 1) / decode_seconds : 0;
}

Session::Session(Engine& engine, const SamplingParams& sampling) : engine_(engine), sampling_(sampling) {}

void Session::truncate(int count) { tokens_.resize(std::clamp<size_t>(count, 0, tokens_.size())); }

StatusOr<GenerationStats> Session::generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                                            const PieceCallback& on_piece) {
  if (options.max_new_tokens < 0) return invalid_argument("max_new_tokens must be >= 0");
  if (prompt.empty()) return invalid_argument("nothing to prefill");
  std::vector<int32_t> sequence = tokens_;
  sequence.insert(sequence.end(), prompt.begin(), prompt.end());
  if (static_cast<int64_t>(sequence.size()) + 1 > context()) {
    return out_of_range("the prompt needs " + std::to_string(sequence.size()) +
                        " positions and one for the reply but the context holds " + std::to_string(context()) +
                        " (raise --context or shorten the prompt)");
  }
  SamplingParams params = sampling_;
  params.max_tokens = options.max_new_tokens;
  params.stop_token_ids = options.stop_tokens;
  params.ignore_eos = options.ignore_eos;
  ++sampling_.seed;  // the next reply draws afresh

  GenerationStats stats;
  stats.prompt_tokens = static_cast<int>(prompt.size());
  std::vector<int32_t> generated;
  RequestOutput last;
  bool stopped_by_callback = false;
  const auto start = Clock::now();
  Clock::time_point first = start;
  RequestId id = 0;
  KUIPER_ASSIGN_OR_RETURN(id, engine_.submit(sequence, params, [&](const RequestOutput& out) {
    if (generated.empty() && !out.tokens.empty()) first = Clock::now();
    generated.insert(generated.end(), out.tokens.begin(), out.tokens.end());
    if (!out.text.empty() && !stopped_by_callback && !on_piece(out.text)) {
      stopped_by_callback = true;
      engine_.cancel(id);
    }
    last = out;
  }));
  for (;;) {
    KUIPER_ASSIGN_OR_RETURN(bool busy, engine_.step());
    if (!busy) break;
  }
  if (last.finish == FinishReason::kError) return last.error;
  if (generated.empty()) first = Clock::now();
  stats.prefill_seconds = seconds_between(start, first);
  stats.decode_seconds = seconds_between(first, Clock::now());
  stats.cached_tokens = last.cached_prompt_tokens;
  stats.generated_tokens = static_cast<int>(generated.size());
  if (stopped_by_callback) {
    stats.stop_reason = StopReason::kCallback;
  } else if (last.finish == FinishReason::kStop) {
    stats.stop_reason = StopReason::kStopToken;
  } else if (stats.generated_tokens < options.max_new_tokens) {
    stats.stop_reason = StopReason::kContextFull;
  }
  tokens_ = std::move(sequence);
  tokens_.insert(tokens_.end(), generated.begin(), generated.end());
  return stats;
}

}  // namespace kuiper
