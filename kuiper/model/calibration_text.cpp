#include "kuiper/model/calibration_text.h"

#include <algorithm>

#include "kuiper/model/llama_model.h"
#include "kuiper/sampler/sampler.h"

namespace kuiper {

StatusOr<std::vector<std::vector<int32_t>>> self_generated_sequences(const LlamaConfig& config,
                                                                     const LlamaWeights& weights, int64_t tokens,
                                                                     int sequence_length, uint64_t seed) {
  if (tokens < 0 || sequence_length < 2) {
    return invalid_argument("self-generated calibration needs a token count ≥ 0 and sequences of at least 2 tokens, got " +
                            std::to_string(tokens) + " and " + std::to_string(sequence_length));
  }
  ModelOptions options;
  options.context = std::min(sequence_length, config.max_seq_len);
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::create(config, weights, options));
  SamplerConfig sampling;
  sampling.temperature = 1.f;
  sampling.seed = seed;
  Sampler sampler(sampling);
  const auto ends_story = [&](int32_t token) {
    return token == config.bos_id || std::find(config.eos_ids.begin(), config.eos_ids.end(), token) != config.eos_ids.end();
  };
  std::vector<std::vector<int32_t>> out;
  for (int64_t total = 0; total < tokens;) {
    std::vector<int32_t> sequence{config.bos_id};
    const int64_t length = std::min<int64_t>(model->context(), tokens - total);
    while (static_cast<int64_t>(sequence.size()) < length) {
      const int position = static_cast<int>(sequence.size()) - 1;
      KUIPER_ASSIGN_OR_RETURN(Tensor logits, model->forward(std::span(&sequence.back(), 1), position));
      KUIPER_ASSIGN_OR_RETURN(int32_t next, sampler.sample(std::span(logits.data<float>(), logits.numel())));
      if (ends_story(next)) break;
      sequence.push_back(next);
    }
    total += static_cast<int64_t>(sequence.size());
    out.push_back(std::move(sequence));
  }
  return out;
}

std::vector<std::vector<int32_t>> text_sequences(std::span<const int32_t> ids, int32_t bos, int64_t tokens,
                                                 int sequence_length) {
  std::vector<std::vector<int32_t>> out;
  const int64_t per_sequence = std::max(sequence_length - 1, 1);
  for (size_t next = 0; next < ids.size() && tokens > 1;) {
    const size_t count = static_cast<size_t>(std::min<int64_t>({per_sequence, tokens - 1, static_cast<int64_t>(ids.size() - next)}));
    std::vector<int32_t> sequence{bos};
    sequence.insert(sequence.end(), ids.begin() + next, ids.begin() + next + count);
    tokens -= static_cast<int64_t>(sequence.size());
    next += count;
    out.push_back(std::move(sequence));
  }
  return out;
}

}  // namespace kuiper
