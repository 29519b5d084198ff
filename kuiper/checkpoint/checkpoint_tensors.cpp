#include "kuiper/checkpoint/checkpoint_tensors.h"

namespace kuiper {

std::vector<MatrixSpec> matrix_specs(const LlamaConfig& c) {
  const int64_t dim = c.dim, vocab = c.vocab_size;
  std::vector<MatrixSpec> out = {{"token_embedding", vocab, dim}};
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    for (const LayerMatrix& m : kLayerMatrices) {
      const MatrixShape shape = layer_matrix_shape(c, m);
      out.push_back({prefix + m.name, shape.rows, shape.cols});
    }
  }
  if (!c.shared_classifier) out.push_back({"classifier", vocab, dim});
  return out;
}

std::vector<NamedMatrix> named_matrices(LlamaWeights& w, bool shared_classifier) {
  std::vector<NamedMatrix> out = {{"token_embedding", &w.token_embedding}};
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    LlamaLayerWeights& layer = w.layers[l];
    for (const LayerMatrix& m : kLayerMatrices) out.push_back({prefix + m.name, &(layer.*m.member)});
  }
  if (!shared_classifier) out.push_back({"classifier", &w.classifier});
  return out;
}

std::vector<NamedVector> named_norms(LlamaWeights& w) {
  std::vector<NamedVector> out;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    out.push_back({prefix + "attention_norm", &w.layers[l].attention_norm});
    out.push_back({prefix + "ffn_norm", &w.layers[l].ffn_norm});
  }
  out.push_back({"final_norm", &w.final_norm});
  return out;
}

}  // namespace kuiper
