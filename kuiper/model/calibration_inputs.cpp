#include "kuiper/model/calibration_inputs.h"

#include <algorithm>

namespace kuiper {
namespace {

struct LayerMatrixInput {
  const char* name;
  MatrixInput input;
};
constexpr LayerMatrixInput kLayerMatrixInputs[] = {
    {"wq", MatrixInput::kAttention},   {"wk", MatrixInput::kAttention},   {"wv", MatrixInput::kAttention},
    {"wo", MatrixInput::kAttentionOutput}, {"w1", MatrixInput::kFeedForward}, {"w3", MatrixInput::kFeedForward},
    {"w2", MatrixInput::kFeedForwardHidden},
};

std::array<InputGram, 4> layer_grams(const LlamaConfig& c) {
  return {InputGram(c.dim), InputGram(c.q_dim()), InputGram(c.dim), InputGram(c.hidden_dim)};
}

size_t layer_bytes(const LlamaConfig& c) {
  size_t elements = 0;
  for (int width : {c.dim, c.q_dim(), c.dim, c.hidden_dim}) elements += static_cast<size_t>(width) * width;
  return elements * sizeof(double);
}

}  // namespace

CalibrationInputs::CalibrationInputs(const LlamaConfig& config, const LlamaWeights& weights,
                                     std::vector<std::vector<int32_t>> sequences, size_t budget_bytes)
    : config_(config),
      weights_(weights),
      sequences_(std::move(sequences)),
      // At least one layer a pass, whatever the budget.
      layers_per_pass_(static_cast<int>(std::clamp<size_t>(budget_bytes / layer_bytes(config), 1, config.n_layers))),
      first_(config.n_layers + 1) {}

int64_t CalibrationInputs::tokens() const {
  int64_t total = 0;
  for (const auto& s : sequences_) total += static_cast<int64_t>(s.size());
  return total;
}

StatusOr<const InputGram*> CalibrationInputs::for_matrix(const std::string& name) {
  int layer = -1;
  MatrixInput input = MatrixInput::kClassifier;
  if (name == "classifier") {
    layer = config_.n_layers;
  } else {
    for (int l = 0; l < config_.n_layers && layer < 0; ++l) {
      for (const LayerMatrixInput& m : kLayerMatrixInputs) {
        if (name == "layers." + std::to_string(l) + "." + m.name) {
          layer = l;
          input = m.input;
        }
      }
    }
  }
  if (layer < 0) return static_cast<const InputGram*>(nullptr);
  const bool held = layer == config_.n_layers ? classifier_held_
                                              : layer >= first_ && layer < first_ + static_cast<int>(layers_.size());
  if (!held) KUIPER_RETURN_IF_ERROR(collect(layer));
  if (input == MatrixInput::kClassifier) return static_cast<const InputGram*>(&classifier_);
  return static_cast<const InputGram*>(&layers_[layer - first_][static_cast<int>(input)]);
}

Status CalibrationInputs::collect(int first) {
  first = std::min(first, config_.n_layers);
  const int count = std::min(layers_per_pass_, config_.n_layers - first);
  // The classifier's is small (dim²): kept with the last layers' pass.
  const bool classifier = first + count == config_.n_layers;
  // Nothing counts as held until the pass completes.
  first_ = config_.n_layers + 1;
  classifier_held_ = false;
  layers_.assign(count, layer_grams(config_));
  classifier_ = InputGram(classifier ? config_.dim : 0);
  ModelOptions options;
  options.observe_inputs = [&](int layer, MatrixInput input, const Tensor& rows) -> Status {
    if (input == MatrixInput::kClassifier) return classifier ? classifier_.add(rows) : ok_status();
    if (layer < first || layer >= first + count) return ok_status();
    return layers_[layer - first][static_cast<int>(input)].add(rows);
  };
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::create(config_, weights_, options));
  for (const std::vector<int32_t>& sequence : sequences_) {
    if (sequence.empty()) continue;
    if (static_cast<int64_t>(sequence.size()) > model->context()) {
      return invalid_argument("a calibration sequence of " + std::to_string(sequence.size()) +
                              " tokens exceeds the model's context of " + std::to_string(model->context()));
    }
    KUIPER_RETURN_IF_ERROR(model->forward_all(sequence, 0).status());
  }
  first_ = first;
  classifier_held_ = classifier;
  ++passes_;
  return ok_status();
}

}  // namespace kuiper
