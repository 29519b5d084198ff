#include "kuiper/model/llama_weights.h"

namespace kuiper {

MatrixShape layer_matrix_shape(const LlamaConfig& c, const LayerMatrix& m) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv = c.kv_dim();
  using W = LlamaLayerWeights;
  if (m.member == &W::wq) return {q_dim, dim};
  if (m.member == &W::wk || m.member == &W::wv) return {kv, dim};
  if (m.member == &W::wo) return {dim, q_dim};
  if (m.member == &W::w2) return {dim, hidden};
  return {hidden, dim};  // w1 (gate) and w3 (up)
}

}  // namespace kuiper
