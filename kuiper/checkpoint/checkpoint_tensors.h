// The parameters of a checkpoint by name, so that converters, writers and reports walk one
// list instead of spelling out the model's structure each time. Names follow kuiper's own
// file format: "token_embedding", "layers.3.wq", "layers.3.attention_norm", "final_norm",
// "classifier".
#pragma once

#include <string>
#include <vector>

#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_weights.h"

namespace kuiper {

struct NamedMatrix {
  std::string name;
  op::Weight* weight;
};

struct NamedVector {
  std::string name;
  Tensor* tensor;
  int64_t length;  // elements the config gives it
};

struct MatrixSpec {
  std::string name;
  int64_t rows, cols;
};

// Names and shapes of the matrices a model of config `c` has, in named_matrices' order.
std::vector<MatrixSpec> matrix_specs(const LlamaConfig& c);

// Every matrix once: the embedding, each layer's wq wk wv wo w1 w2 w3, and the classifier
// unless it is shared (then it is the embedding and is not listed again).
std::vector<NamedMatrix> named_matrices(LlamaWeights& weights, bool shared_classifier);

// The fp32 vectors: each layer's attention and ffn norms (and, where config `c` has them, its
// projection biases and per-head q/k norms), then the final norm.
std::vector<NamedVector> named_norms(LlamaWeights& weights, const LlamaConfig& c);

}  // namespace kuiper
