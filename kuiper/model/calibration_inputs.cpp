#include "kuiper/model/calibration_inputs.h"

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

}  // namespace

const InputGram* CalibrationInputs::for_matrix(const std::string& name) const {
  if (name == "classifier") return &classifier;
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    if (name.rfind(prefix, 0) != 0) continue;
    for (const LayerMatrixInput& m : kLayerMatrixInputs) {
      if (name == prefix + m.name) return &layers[l][static_cast<int>(m.input)];
    }
  }
  return nullptr;
}

StatusOr<CalibrationInputs> collect_calibration_inputs(const LlamaConfig& config, const LlamaWeights& weights,
                                                       std::span<const std::vector<int32_t>> sequences) {
  CalibrationInputs out;
  out.layers.resize(config.n_layers, {InputGram(config.dim), InputGram(config.q_dim()), InputGram(config.dim),
                                      InputGram(config.hidden_dim)});
  out.classifier = InputGram(config.dim);
  ModelOptions options;
  options.observe_inputs = [&](int layer, MatrixInput input, const Tensor& rows) -> Status {
    return input == MatrixInput::kClassifier ? out.classifier.add(rows)
                                             : out.layers[layer][static_cast<int>(input)].add(rows);
  };
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::create(config, weights, options));
  for (const std::vector<int32_t>& sequence : sequences) {
    if (sequence.empty()) continue;
    if (static_cast<int64_t>(sequence.size()) > model->context()) {
      return invalid_argument("a calibration sequence of " + std::to_string(sequence.size()) +
                              " tokens exceeds the model's context of " + std::to_string(model->context()));
    }
    KUIPER_RETURN_IF_ERROR(model->forward_all(sequence, 0).status());
    out.tokens += static_cast<int64_t>(sequence.size());
  }
  return out;
}

}  // namespace kuiper
