#include "kuiper/generation/session.h"

#include <algorithm>
#include <chrono>

namespace kuiper {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
  return decode_seconds > 0 ? generated_tokens / decode_seconds : 0;
}

Session::Session(LlamaModel& model, const Tokenizer& tokenizer, Sampler& sampler)
    : model_(model), tokenizer_(tokenizer), sampler_(sampler) {}

void Session::truncate(int count) {
  tokens_.resize(std::clamp<size_t>(count, 0, tokens_.size()));
}

StatusOr<Tensor> Session::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) return invalid_argument("nothing to prefill");
  const int64_t needed = static_cast<int64_t>(tokens_.size()) + static_cast<int64_t>(tokens.size());
  if (needed > model_.context()) {
    return out_of_range("the prompt needs " + std::to_string(needed) + " positions but the context holds " +
                        std::to_string(model_.context()) + " (raise --context or shorten the prompt)");
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor logits, model_.forward(tokens, position()));
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  return logits;
}

StatusOr<int32_t> Session::next_token(const Tensor& logits) {
  if (sampler_.is_greedy() && logits.device() != DeviceType::kCPU) {
    // Greedy on the GPU: reduce there and bring back 4 bytes instead of the whole vocabulary.
    if (argmax_out_.is_empty()) {
      KUIPER_ASSIGN_OR_RETURN(Allocator * alloc, allocator_for(logits.device()));
      KUIPER_ASSIGN_OR_RETURN(argmax_out_, Tensor::empty(DataType::kINT32, {1}, *alloc));
    }
    KUIPER_RETURN_IF_ERROR(op::argmax(logits, argmax_out_, model_.execution_context()));
    int32_t token = 0;
    KUIPER_RETURN_IF_ERROR(copy_bytes(&token, DeviceType::kCPU, argmax_out_.raw_data(),
                                      argmax_out_.device(), sizeof(token), model_.stream()));
    KUIPER_RETURN_IF_ERROR(synchronize(model_.stream()));
    if (token < 0) return non_finite_logits();
    return token;
  }
  host_logits_.resize(logits.numel());
  KUIPER_RETURN_IF_ERROR(copy_bytes(host_logits_.data(), DeviceType::kCPU, logits.raw_data(),
                                    logits.device(), logits.nbytes(), model_.stream()));
  KUIPER_RETURN_IF_ERROR(synchronize(model_.stream()));
  StatusOr<int32_t> token = sampler_.sample(host_logits_);
  if (!token.ok() && token.status().code() == StatusCode::kInvalidArgument) return non_finite_logits();
  return token;
}

Status Session::non_finite_logits() const {
  return invalid_format("the model produced non-finite logits at position " + std::to_string(position() - 1) +
                             " (NaN or infinite weights, or an overflow)");
}

StatusOr<GenerationStats> Session::generate(std::span<const int32_t> prompt,
                                            const GenerationOptions& options,
                                            const PieceCallback& on_piece) {
  if (options.max_new_tokens < 0) return invalid_argument("max_new_tokens must be >= 0");
  const std::vector<int32_t> stops = options.stop_tokens.empty() ? tokenizer_.eos_ids() : options.stop_tokens;
  GenerationStats stats;
  stats.prompt_tokens = static_cast<int>(prompt.size());

  auto start = std::chrono::steady_clock::now();
  KUIPER_ASSIGN_OR_RETURN(Tensor logits, prefill(prompt));
  KUIPER_ASSIGN_OR_RETURN(int32_t token, next_token(logits));  // waits for the prefill to finish
  stats.prefill_seconds = seconds_since(start);

  StreamDecoder decoder(tokenizer_);
  // Decoding continues from the last prompt token, so pieces render as they would in context.
  decoder.push(tokens_.back());
  start = std::chrono::steady_clock::now();
  stats.stop_reason = StopReason::kMaxTokens;
  while (stats.generated_tokens < options.max_new_tokens) {
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      stats.stop_reason = StopReason::kStopToken;
      stats.stop_token = token;
      break;
    }
    ++stats.generated_tokens;
    const std::string piece = decoder.push(token);
    if (!piece.empty() && !on_piece(piece)) {
      stats.stop_reason = StopReason::kCallback;
      break;
    }
    if (position() >= model_.context()) {
      stats.stop_reason = StopReason::kContextFull;
      break;
    }
    const int32_t input[1] = {token};
    KUIPER_ASSIGN_OR_RETURN(logits, model_.forward(input, position()));
    tokens_.push_back(token);
    if (stats.generated_tokens == options.max_new_tokens) break;
    KUIPER_ASSIGN_OR_RETURN(token, next_token(logits));
  }
  const std::string rest = decoder.flush();
  if (!rest.empty()) on_piece(rest);
  KUIPER_RETURN_IF_ERROR(synchronize(model_.stream()));
  stats.decode_seconds = seconds_since(start);
  return stats;
}

}  // namespace kuiper
