// Reading quantized matrices the way llama2.c's and KuiperLLama's exporters lay them out: for
// each matrix, its int8 values (row-major) immediately followed by its fp32 group scales.
#pragma once

#include <string>
#include <vector>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// The seven int32 dimensions both int8 layouts start their header with (dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len), as a validated config. A negative
// vocab_size means an unshared classifier (llama2.c v2 records that in a flag byte instead,
// which its loader applies afterwards).
StatusOr<LlamaConfig> read_int8_header_dims(FileCursor& cursor);

// Bytes one quantized matrix of `numel` weights occupies (values + scales); 0 when numel is not
// a whole number of groups, which no valid file can hold.
size_t int8_matrix_bytes(int64_t numel, int group_size);

// Bytes of all quantized matrices of a model: the per-layer ones, plus the embedding when
// `with_embedding` and the classifier when it is not shared.
size_t int8_model_matrix_bytes(const LlamaConfig& c, int group_size, bool with_embedding);

// The next quantized matrix [rows, cols] as a zero-copy int8 Weight.
StatusOr<op::Weight> take_int8_matrix(FileCursor& cursor, int64_t rows, int64_t cols,
                                      int group_size, const std::string& what);

// The seven per-layer matrices, each kind for all layers in turn (wq of every layer, then wk,
// ... w3), as both exporters write them.
Status take_int8_layer_matrices(FileCursor& cursor, const LlamaConfig& c, int group_size,
                                std::vector<LlamaLayerWeights>& layers);

// The fp32 norm vectors in the order both layouts keep them: attention norms of all layers,
// ffn norms of all layers, final norm.
Status take_fp32_norms(FileCursor& cursor, const LlamaConfig& c, LlamaWeights& w);

}  // namespace kuiper
