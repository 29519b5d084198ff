// What calibration-based quantization (int4_gptq.h) learns of a model's inputs: the Gram matrix
// of the rows each of its matrices multiplies, summed while the unquantized model runs calibration
// token sequences (calibration_text.h) on the CPU. Quantizing every matrix against the inputs of
// the original model, rather than of the model quantized so far, needs one pass only; GPTQ's
// paper does the latter, which on stories260K gained 0.1% of perplexity (docs/performance.md).
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

#include "kuiper/model/input_gram.h"
#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/model/llama_weights.h"

namespace kuiper {

struct CalibrationInputs {
  // Per layer, indexed by MatrixInput (kAttention … kFeedForwardHidden).
  std::vector<std::array<InputGram, 4>> layers;
  InputGram classifier;
  int64_t tokens = 0;

  // The inputs of a matrix named as checkpoint_tensors.h names it ("layers.3.wq", "classifier");
  // null for the token embedding, a lookup that multiplies nothing.
  const InputGram* for_matrix(const std::string& name) const;
};

// Runs each sequence (token ids, each within the context) from position 0 through the model of
// `config` and host `weights` on the CPU and sums what every matrix multiplies.
StatusOr<CalibrationInputs> collect_calibration_inputs(const LlamaConfig& config, const LlamaWeights& weights,
                                                       std::span<const std::vector<int32_t>> sequences);

}  // namespace kuiper
