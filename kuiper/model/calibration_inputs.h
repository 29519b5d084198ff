// What calibration-based quantization (int4_gptq.h) learns of a model's inputs: the Gram matrix
// of the rows each of its matrices multiplies, summed while the unquantized model runs calibration
// token sequences (calibration_text.h) on the CPU. Every matrix is quantized against the inputs
// of the original model, not of the model quantized so far as GPTQ's paper does: that gained
// 0.1% of perplexity on stories260K (docs/performance.md) and would need a pass per layer.
//
// The Gram matrices take 8 · (2 dim² + q_dim² + hidden²) bytes a layer (1.4 GB for a 7B model),
// so they are held for as many layers at a time as a memory budget allows: asking for a matrix of
// a layer not held runs the sequences again and keeps the layers from there on.
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

inline constexpr size_t kDefaultCalibrationBudgetBytes = size_t{4} << 30;

class CalibrationInputs {
 public:
  // Refers to `config` and host `weights`, which must outlive it; the sequences (token ids, each
  // within the context) are run from position 0.
  CalibrationInputs(const LlamaConfig& config, const LlamaWeights& weights, std::vector<std::vector<int32_t>> sequences,
                    size_t budget_bytes = kDefaultCalibrationBudgetBytes);

  // The inputs of a matrix named as checkpoint_tensors.h names it ("layers.3.wq", "classifier"),
  // collected when its layer is not held (invalidating what earlier calls returned); null for
  // the token embedding, a lookup that multiplies nothing.
  StatusOr<const InputGram*> for_matrix(const std::string& name);

  int64_t tokens() const;
  int passes() const { return passes_; }  // runs over the sequences so far

 private:
  // Runs the sequences and keeps the Gram matrices of layers [first, first + count) (the
  // classifier's as layer n_layers).
  Status collect(int first);

  const LlamaConfig& config_;
  const LlamaWeights& weights_;
  std::vector<std::vector<int32_t>> sequences_;
  int layers_per_pass_;
  int first_ = 0;
  std::vector<std::array<InputGram, 4>> layers_;  // held layers, indexed by MatrixInput
  InputGram classifier_;
  bool classifier_held_ = false;
  int passes_ = 0;
};

}  // namespace kuiper
