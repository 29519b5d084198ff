#include "kuiper/checkpoint/checkpoint_tensors.h"

#include <tuple>

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

std::vector<NamedVector> named_norms(LlamaWeights& w, const LlamaConfig& c) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv = c.kv_dim(), head = c.head_dim();
  std::vector<NamedVector> out;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    LlamaLayerWeights& layer = w.layers[l];
    const auto add_if = [&](bool present, std::initializer_list<std::tuple<const char*, Tensor*, int64_t>> vectors) {
      if (!present) return;
      for (auto [name, tensor, length] : vectors) out.push_back({prefix + name, tensor, length});
    };
    add_if(true, {{"attention_norm", &layer.attention_norm, dim}, {"ffn_norm", &layer.ffn_norm, dim}});
    add_if(c.qkv_bias, {{"bq", &layer.bq, q_dim}, {"bk", &layer.bk, kv}, {"bv", &layer.bv, kv}});
    add_if(c.output_bias, {{"bo", &layer.bo, dim}});
    add_if(c.mlp_bias, {{"b1", &layer.b1, hidden}, {"b2", &layer.b2, dim}, {"b3", &layer.b3, hidden}});
    add_if(c.qk_norm, {{"q_norm", &layer.q_norm, head}, {"k_norm", &layer.k_norm, head}});
  }
  out.push_back({"final_norm", &w.final_norm, dim});
  return out;
}

}  // namespace kuiper
