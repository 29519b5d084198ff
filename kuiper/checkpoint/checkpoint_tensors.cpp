#include "kuiper/checkpoint/checkpoint_tensors.h"

namespace kuiper {

std::vector<MatrixSpec> matrix_specs(const LlamaConfig& c) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = int64_t{c.n_heads} * c.head_dim(),
                kv = c.kv_dim(), vocab = c.vocab_size;
  std::vector<MatrixSpec> out = {{"token_embedding", vocab, dim}};
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    for (MatrixSpec spec : {MatrixSpec{"wq", q_dim, dim}, {"wk", kv, dim}, {"wv", kv, dim},
                            {"wo", dim, q_dim}, {"w1", hidden, dim}, {"w2", dim, hidden},
                            {"w3", hidden, dim}}) {
      out.push_back({prefix + spec.name, spec.rows, spec.cols});
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
    for (auto [name, weight] : {std::pair{"wq", &layer.wq}, {"wk", &layer.wk}, {"wv", &layer.wv},
                                {"wo", &layer.wo}, {"w1", &layer.w1}, {"w2", &layer.w2},
                                {"w3", &layer.w3}}) {
      out.push_back({prefix + name, weight});
    }
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
