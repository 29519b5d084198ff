#include "kuiper/checkpoint/formats/gguf_layout.h"

#include "kuiper/checkpoint/formats/hf_safetensors.h"

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

namespace {

StatusOr<Tensor> reorder_rows(const Tensor& t, int heads, bool to_interleaved) {
  return to_interleaved ? unpermute_rope_rows(t, heads) : permute_rope_rows(t, heads);
}

}  // namespace

StatusOr<op::Weight> reorder_rope_weight(const op::Weight& w, int heads, bool to_interleaved) {
  op::Weight out = w;
  KUIPER_ASSIGN_OR_RETURN(out.values, reorder_rows(w.values, heads, to_interleaved));
  const int64_t rows = w.values.dim(0);
  for (Tensor op::Weight::*per_group : {&op::Weight::scales, &op::Weight::mins}) {
    const Tensor& from = w.*per_group;
    if (from.is_empty()) continue;
    KUIPER_ASSIGN_OR_RETURN(Tensor by_row, from.reshape({rows, from.numel() / rows}));
    KUIPER_ASSIGN_OR_RETURN(Tensor moved, reorder_rows(by_row, heads, to_interleaved));
    KUIPER_ASSIGN_OR_RETURN(out.*per_group, moved.reshape({from.numel()}));
  }
  return out;
}

StatusOr<Tensor> reorder_rope_vector(const Tensor& v, int heads, bool to_interleaved) {
  KUIPER_ASSIGN_OR_RETURN(Tensor column, v.reshape({v.numel(), 1}));
  KUIPER_ASSIGN_OR_RETURN(Tensor moved, reorder_rows(column, heads, to_interleaved));
  return moved.reshape({v.numel()});
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
