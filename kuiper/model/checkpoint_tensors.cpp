#include "kuiper/model/checkpoint_tensors.h"

namespace kuiper {

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
