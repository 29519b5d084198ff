#include "kuiper/checkpoint/formats/gguf_layout.h"

namespace kuiper {

bool gguf_qk_in_hf_order(const std::string& arch) { return arch != "llama"; }

std::string gguf_layer_tensor(int layer, const std::string& suffix) {
  return "blk." + std::to_string(layer) + "." + suffix;
}

std::vector<GgufLayerVector> gguf_layer_vectors(const LlamaConfig& c) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), q = c.q_dim();
  using L = LlamaLayerWeights;
  std::vector<GgufLayerVector> v = {{"attn_norm.weight", &L::attention_norm, dim, 0},
                                    {"ffn_norm.weight", &L::ffn_norm, dim, 0}};
  if (c.qkv_bias) {
    v.push_back({"attn_q.bias", &L::bq, q, c.n_heads});
    v.push_back({"attn_k.bias", &L::bk, kv, c.n_kv_heads});
    v.push_back({"attn_v.bias", &L::bv, kv, 0});
  }
  if (c.output_bias) v.push_back({"attn_output.bias", &L::bo, dim, 0});
  if (c.mlp_bias) {
    v.push_back({"ffn_gate.bias", &L::b1, hidden, 0});
    v.push_back({"ffn_down.bias", &L::b2, dim, 0});
    v.push_back({"ffn_up.bias", &L::b3, hidden, 0});
  }
  if (c.qk_norm) {
    v.push_back({"attn_q_norm.weight", &L::q_norm, c.head_dim(), 1});
    v.push_back({"attn_k_norm.weight", &L::k_norm, c.head_dim(), 1});
  }
  return v;
}

std::vector<float> llama3_rope_factors(const LlamaConfig& c) {
  LlamaConfig unscaled = c;
  unscaled.rope_scaling.enabled = false;
  const std::vector<float> base = rope_inverse_frequencies(unscaled);
  const std::vector<float> scaled = rope_inverse_frequencies(c);
  std::vector<float> factors(base.size());
  for (size_t i = 0; i < base.size(); ++i) factors[i] = base[i] / scaled[i];
  return factors;
}

}  // namespace kuiper
