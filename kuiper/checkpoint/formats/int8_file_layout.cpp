#include "kuiper/checkpoint/formats/int8_file_layout.h"

#include "kuiper/checkpoint/formats/llama2c_header.h"
#include "kuiper/op/int8_weight.h"

namespace kuiper {

StatusOr<LlamaConfig> read_int8_header_dims(FileCursor& cursor) {
  int32_t v[7];
  for (int32_t& field : v) {
    KUIPER_ASSIGN_OR_RETURN(field, cursor.read<int32_t>("header"));
  }
  LlamaConfig c;
  c.dim = v[0];
  c.hidden_dim = v[1];
  c.n_layers = v[2];
  c.n_heads = v[3];
  c.n_kv_heads = v[4];
  const SignedVocab vocab = decode_signed_vocab(v[5]);
  c.vocab_size = vocab.size;
  c.max_seq_len = v[6];
  c.shared_classifier = vocab.shared_classifier;
  Status valid = c.validate();
  if (!valid.ok()) return Status(valid.code(), cursor.file()->path() + ": " + valid.message());
  return c;
}

size_t int8_matrix_bytes(int64_t numel, int group_size) {
  if (group_size <= 0 || numel % group_size != 0) return 0;
  return static_cast<size_t>(numel) + static_cast<size_t>(numel / group_size) * sizeof(float);
}

size_t int8_model_matrix_bytes(const LlamaConfig& c, int group_size, bool with_embedding) {
  size_t total = 0;
  for (const LayerMatrix& m : kLayerMatrices) {
    const MatrixShape shape = layer_matrix_shape(c, m);
    total += int8_matrix_bytes(shape.rows * shape.cols, group_size) * c.n_layers;
  }
  const size_t table = int8_matrix_bytes(int64_t{c.vocab_size} * c.dim, group_size);
  return total + (with_embedding ? table : 0) + (c.shared_classifier ? 0 : table);
}

StatusOr<op::Weight> take_int8_matrix(FileCursor& cursor, int64_t rows, int64_t cols,
                                      int group_size, const std::string& what) {
  if (group_size <= 0 || rows * cols % group_size != 0) {
    return invalid_format(cursor.file()->path() + ": " + what + " has " + std::to_string(rows * cols) +
                          " weights, not a whole number of groups of " + std::to_string(group_size));
  }
  op::Weight w;
  w.group_size = group_size;
  KUIPER_ASSIGN_OR_RETURN(w.values, cursor.take(DataType::kINT8, {rows, cols}, what + " values"));
  KUIPER_ASSIGN_OR_RETURN(w.scales, cursor.take(DataType::kFP32, {rows * cols / group_size}, what + " scales"));
  KUIPER_RETURN_IF_ERROR(op::check_int8_weight(w));
  return w;
}

Status take_int8_layer_matrices(FileCursor& cursor, const LlamaConfig& c, int group_size,
                                std::vector<LlamaLayerWeights>& layers) {
  for (const LayerMatrix& m : kLayerMatrices) {
    const MatrixShape shape = layer_matrix_shape(c, m);
    for (size_t l = 0; l < layers.size(); ++l) {
      KUIPER_ASSIGN_OR_RETURN(layers[l].*m.member,
                              take_int8_matrix(cursor, shape.rows, shape.cols, group_size,
                                               "layer " + std::to_string(l) + " " + m.name));
    }
  }
  return ok_status();
}

Status take_fp32_norms(FileCursor& cursor, const LlamaConfig& c, LlamaWeights& w) {
  for (size_t l = 0; l < w.layers.size(); ++l) {
    KUIPER_ASSIGN_OR_RETURN(w.layers[l].attention_norm,
                            cursor.take(DataType::kFP32, {c.dim}, "layer " + std::to_string(l) + " attention norm"));
  }
  for (size_t l = 0; l < w.layers.size(); ++l) {
    KUIPER_ASSIGN_OR_RETURN(w.layers[l].ffn_norm,
                            cursor.take(DataType::kFP32, {c.dim}, "layer " + std::to_string(l) + " ffn norm"));
  }
  KUIPER_ASSIGN_OR_RETURN(w.final_norm, cursor.take(DataType::kFP32, {c.dim}, "final norm"));
  return ok_status();
}

}  // namespace kuiper
