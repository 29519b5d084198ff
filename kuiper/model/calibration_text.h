// Token sequences to calibrate a quantizer on (calibration_inputs.h). By default the model's own
// writing: sampled from BOS at temperature 1, it is text of the kind the model was trained on,
// needs no data set, and cannot overlap an evaluation text (as in data-free methods such as
// LLM-QAT). Or a text the user supplies, cut into sequences.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_weights.h"

namespace kuiper {

// Sequences the model of `config` and host `weights` writes on the CPU, each from BOS until it
// ends a story (an end token, or BOS again) or reaches `sequence_length` tokens (BOS included,
// at most the model's context), until `tokens` tokens in all. The same seed gives the same text.
StatusOr<std::vector<std::vector<int32_t>>> self_generated_sequences(const LlamaConfig& config,
                                                                     const LlamaWeights& weights, int64_t tokens,
                                                                     int sequence_length, uint64_t seed);

// The first `tokens` tokens of a tokenized text, in sequences of `sequence_length` tokens each
// led by `bos` (which counts towards both).
std::vector<std::vector<int32_t>> text_sequences(std::span<const int32_t> ids, int32_t bos, int64_t tokens,
                                                 int sequence_length);

}  // namespace kuiper
