// KuiperLLama's int8 checkpoints (its export.py --version 3). Header: 8 int32 — dim,
// hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative = unshared classifier),
// max_seq_len, group_size — and no magic number. Body: int8 values + fp32 scales of wq (all
// layers), wk, wv, wo, w1, w2, w3 and, if unshared, the classifier; then fp32 token
// embedding, attention norms, ffn norms and final norm.
//
// Without a magic number, a file is taken for this format only when its size is exactly what
// its header implies; forcing the format on another file fails on that same check.
#include "kuiper/checkpoint/formats/int8_file_layout.h"
#include "kuiper/checkpoint/formats/formats.h"

namespace kuiper {
namespace {

constexpr size_t kHeaderBytes = 8 * sizeof(int32_t);

struct V3Header {
  LlamaConfig config;
  int32_t group_size = 0;
};

size_t expected_size(const V3Header& h) {
  const LlamaConfig& c = h.config;
  const size_t matrices = int8_model_matrix_bytes(c, h.group_size, /*with_embedding=*/false);
  if (matrices == 0) return 0;
  const size_t floats = size_t(c.vocab_size) * c.dim + (2 * size_t(c.n_layers) + 1) * c.dim;
  return kHeaderBytes + matrices + floats * sizeof(float);
}

// The header, checked against the file's size.
StatusOr<V3Header> read_header(const std::shared_ptr<MappedFile>& file, FileCursor& cursor) {
  V3Header h;
  KUIPER_ASSIGN_OR_RETURN(h.config, read_int8_header_dims(cursor));
  KUIPER_ASSIGN_OR_RETURN(h.group_size, cursor.read<int32_t>("group size"));
  const size_t expected = h.group_size > 0 ? expected_size(h) : 0;
  if (expected == 0) {
    return invalid_format(file->path() + ": not a KuiperLLama int8 file: group size " +
                          std::to_string(h.group_size) + " does not divide the matrices of " +
                          h.config.summary());
  }
  if (file->size() != expected) {
    return invalid_format(file->path() + ": not a KuiperLLama int8 file: it is " +
                          std::to_string(file->size()) + " bytes but its header (" + h.config.summary() +
                          ", groups of " + std::to_string(h.group_size) + ") implies " +
                          std::to_string(expected));
  }
  return h;
}

bool detect_v3(const std::shared_ptr<MappedFile>& file) {
  FileCursor cursor(file);
  return read_header(file, cursor).ok();
}

StatusOr<Checkpoint> load_v3(std::shared_ptr<MappedFile> file) {
  FileCursor cursor(file);
  KUIPER_ASSIGN_OR_RETURN(V3Header h, read_header(file, cursor));
  const LlamaConfig& c = h.config;
  Checkpoint ckpt{c, {}, "KuiperLLama v3 (int8, groups of " + std::to_string(h.group_size) + ")", file->path(), {}};
  LlamaWeights& w = ckpt.weights;
  w.layers.resize(c.n_layers);
  KUIPER_RETURN_IF_ERROR(take_int8_layer_matrices(cursor, c, h.group_size, w.layers));
  if (!c.shared_classifier) {
    KUIPER_ASSIGN_OR_RETURN(w.classifier, take_int8_matrix(cursor, c.vocab_size, c.dim, h.group_size, "classifier"));
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor embedding, cursor.take(DataType::kFP32, {c.vocab_size, c.dim}, "token embedding"));
  w.token_embedding = op::Weight{std::move(embedding), Tensor(), 0};
  // A shared classifier is the fp32 embedding; the model quantizes it along with its dtype.
  if (c.shared_classifier) w.classifier = w.token_embedding;
  KUIPER_RETURN_IF_ERROR(take_fp32_norms(cursor, c, w));
  return ckpt;
}

}  // namespace

const CheckpointFormat& kuiperllama_v3_format() {
  static const CheckpointFormat format{"kuiperllama-v3", detect_v3, load_v3};
  return format;
}

}  // namespace kuiper
