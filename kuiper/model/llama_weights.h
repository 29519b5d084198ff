// The parameters of a LLaMA model as tensors, wherever they live (a mapped file, host or
// device memory). Matrices are [out_features, in_features], row-major, and q/k projections use
// the interleaved-pair RoPE layout (loaders of HF files permute them into it).
#pragma once

#include <vector>

#include "kuiper/model/llama_config.h"
#include "kuiper/op/weight.h"
#include "kuiper/tensor/tensor.h"

namespace kuiper {

struct LlamaLayerWeights {
  Tensor attention_norm;  // fp32 [dim]
  op::Weight wq;          // [n_heads * head_dim, dim]
  op::Weight wk;          // [n_kv_heads * head_dim, dim]
  op::Weight wv;          // [n_kv_heads * head_dim, dim]
  op::Weight wo;          // [dim, n_heads * head_dim]
  Tensor ffn_norm;        // fp32 [dim]
  op::Weight w1;          // gate [hidden_dim, dim]
  op::Weight w2;          // down [dim, hidden_dim]
  op::Weight w3;          // up   [hidden_dim, dim]
  // Present only where the config's switches say (llama_config.h), fp32, empty otherwise.
  Tensor bq, bk, bv;      // q, k, v biases [n_heads * head_dim], [kv_dim], [kv_dim]
  Tensor bo;              // output bias [dim]
  Tensor b1, b2, b3;      // gate, down, up biases [hidden_dim], [dim], [hidden_dim]
  Tensor q_norm, k_norm;  // per-head RMSNorm weights [head_dim]
};

// A layer's matrices in the order Meta's and llama2.c's files store them, with the names kuiper's
// own format gives them: the one list that loaders, writers and converters walk.
struct LayerMatrix {
  const char* name;
  op::Weight LlamaLayerWeights::*member;
};
inline constexpr LayerMatrix kLayerMatrices[] = {
    {"wq", &LlamaLayerWeights::wq}, {"wk", &LlamaLayerWeights::wk}, {"wv", &LlamaLayerWeights::wv},
    {"wo", &LlamaLayerWeights::wo}, {"w1", &LlamaLayerWeights::w1}, {"w2", &LlamaLayerWeights::w2},
    {"w3", &LlamaLayerWeights::w3},
};

struct MatrixShape {
  int64_t rows, cols;
};
// The shape of layer matrix `m` in a model of config `c`.
MatrixShape layer_matrix_shape(const LlamaConfig& c, const LayerMatrix& m);

struct LlamaWeights {
  op::Weight token_embedding;  // [vocab, dim]
  std::vector<LlamaLayerWeights> layers;
  Tensor final_norm;           // fp32 [dim]
  op::Weight classifier;       // [vocab, dim]; the token embedding itself when shared
};

}  // namespace kuiper
