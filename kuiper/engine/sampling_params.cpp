#include <cmath>

#include "kuiper/engine/engine.h"

namespace kuiper {

Status validate(const SamplingParams& p) {
  const auto finite_at_least = [](float v, float low) { return std::isfinite(v) && v >= low; };
  if (!finite_at_least(p.temperature, 0.f)) {
    return invalid_argument("temperature must be a finite number >= 0, got " + std::to_string(p.temperature));
  }
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) return invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < 0) return invalid_argument("top_k must be >= 0, got " + std::to_string(p.top_k));
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) return invalid_argument("min_p must be in [0, 1], got " + std::to_string(p.min_p));
  if (!(std::isfinite(p.presence_penalty) && std::fabs(p.presence_penalty) <= 2.f)) {
    return invalid_argument("presence_penalty must be in [-2, 2], got " + std::to_string(p.presence_penalty));
  }
  if (!(std::isfinite(p.frequency_penalty) && std::fabs(p.frequency_penalty) <= 2.f)) {
    return invalid_argument("frequency_penalty must be in [-2, 2], got " + std::to_string(p.frequency_penalty));
  }
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f)) {
    return invalid_argument("repetition_penalty must be a finite number > 0, got " +
                            std::to_string(p.repetition_penalty));
  }
  if (p.max_tokens < 0) return invalid_argument("max_tokens must be >= 0, got " + std::to_string(p.max_tokens));
  for (const std::string& s : p.stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  }
  return ok_status();
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

}  // namespace kuiper
