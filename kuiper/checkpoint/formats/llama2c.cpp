// llama2.c checkpoints (fp32): the legacy v0 layout (7-int header, no magic) and v1 ("ak42"
// magic, 256-byte header). See karpathy/llama2.c export.py for the writer.
#include "kuiper/checkpoint/checkpoint.h"
#include "kuiper/checkpoint/formats/formats.h"
#include "kuiper/checkpoint/formats/llama2c_header.h"

namespace kuiper {
namespace {

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
};

StatusOr<Llama2cHeader> read_dims(FileCursor& cursor) {
  Llama2cHeader h{};
  int32_t* fields[] = {&h.dim, &h.hidden_dim, &h.n_layers, &h.n_heads, &h.n_kv_heads,
                       &h.vocab_size, &h.max_seq_len};
  for (int32_t* field : fields) {
    KUIPER_ASSIGN_OR_RETURN(*field, cursor.read<int32_t>("header"));
  }
  return h;
}

StatusOr<LlamaConfig> config_from(const Llama2cHeader& h, bool shared_classifier,
                                  const std::string& path) {
  LlamaConfig c;
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.vocab_size = h.vocab_size;
  c.max_seq_len = h.max_seq_len;
  c.shared_classifier = shared_classifier;
  Status valid = c.validate();
  if (!valid.ok()) return Status(valid.code(), path + ": " + valid.message());
  return c;
}

// Number of fp32 values the weights of `c` occupy (without legacy extras).
int64_t weight_floats(const LlamaConfig& c) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers, kv = c.kv_dim();
  const int64_t per_layer = 2 * dim + dim * dim * 2 + dim * kv * 2 + dim * hidden * 3;
  return c.vocab_size * dim * (c.shared_classifier ? 1 : 2) + layers * per_layer + dim;
}

Status expect_size(const MappedFile& file, size_t expected, const LlamaConfig& c) {
  if (file.size() != expected) {
    return invalid_format(file.path() + ": file is " + std::to_string(file.size()) +
                          " bytes but its header (" + c.summary() + ") implies " +
                          std::to_string(expected));
  }
  return ok_status();
}

op::Weight fp32_weight(Tensor t) { return op::Weight{std::move(t), Tensor(), 0}; }

// Takes `count` consecutive per-layer matrices [rows, cols] (llama2.c stores each kind of
// weight for all layers together).
Status take_layer_matrices(FileCursor& cursor, std::vector<LlamaLayerWeights>& layers,
                           op::Weight LlamaLayerWeights::*member, int64_t rows, int64_t cols,
                           const char* name) {
  for (size_t l = 0; l < layers.size(); ++l) {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, cursor.take(DataType::kFP32, {rows, cols},
                                                  "layer " + std::to_string(l) + " " + name));
    layers[l].*member = fp32_weight(std::move(t));
  }
  return ok_status();
}

Status take_layer_vectors(FileCursor& cursor, std::vector<LlamaLayerWeights>& layers,
                          Tensor LlamaLayerWeights::*member, int64_t n, const char* name) {
  for (size_t l = 0; l < layers.size(); ++l) {
    KUIPER_ASSIGN_OR_RETURN(layers[l].*member, cursor.take(DataType::kFP32, {n},
                                                           "layer " + std::to_string(l) + " " + name));
  }
  return ok_status();
}

Status take_matrices(FileCursor& cursor, const LlamaConfig& c, LlamaWeights& w) {
  const int64_t dim = c.dim, q_dim = c.n_heads * c.head_dim(), kv = c.kv_dim();
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::wq, q_dim, dim, "wq"));
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::wk, kv, dim, "wk"));
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::wv, kv, dim, "wv"));
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::wo, dim, q_dim, "wo"));
  return ok_status();
}

Status take_ffn(FileCursor& cursor, const LlamaConfig& c, LlamaWeights& w) {
  const int64_t dim = c.dim, hidden = c.hidden_dim;
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::w1, hidden, dim, "w1"));
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::w2, dim, hidden, "w2"));
  KUIPER_RETURN_IF_ERROR(take_layer_matrices(cursor, w.layers, &LlamaLayerWeights::w3, hidden, dim, "w3"));
  return ok_status();
}

Status take_classifier(FileCursor& cursor, const LlamaConfig& c, LlamaWeights& w) {
  if (c.shared_classifier) {
    w.classifier = w.token_embedding;
    return ok_status();
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor t, cursor.take(DataType::kFP32, {c.vocab_size, c.dim}, "classifier"));
  w.classifier = fp32_weight(std::move(t));
  return ok_status();
}

// ---- v0 (legacy) ---------------------------------------------------------------------------
// Header: 7 int32; negative vocab_size means an unshared classifier. Weights: embedding,
// attention norms, wq, wk, wv, wo, ffn norms, w1, w2, w3, final norm, then the legacy RoPE
// tables freq_cis_real/imag [max_seq_len, head_dim/2] (skipped: we compute our own), then the
// classifier if unshared.

size_t v0_expected_size(const LlamaConfig& c) {
  const int64_t rope_tables = static_cast<int64_t>(c.max_seq_len) * c.head_dim();  // real + imag
  return 7 * sizeof(int32_t) + static_cast<size_t>(weight_floats(c) + rope_tables) * sizeof(float);
}

StatusOr<LlamaConfig> v0_config(const MappedFile& file, FileCursor& cursor) {
  KUIPER_ASSIGN_OR_RETURN(Llama2cHeader h, read_dims(cursor));
  const SignedVocab vocab = decode_signed_vocab(h.vocab_size);
  h.vocab_size = vocab.size;
  return config_from(h, vocab.shared_classifier, file.path());
}

bool detect_v0(const std::shared_ptr<MappedFile>& file) {
  // No magic number: claim any file whose 7-int header describes a plausible model; load_v0
  // then reports a size that does not match that header, which is the likely damage.
  FileCursor cursor(file);
  return v0_config(*file, cursor).ok();
}

StatusOr<Checkpoint> load_v0(std::shared_ptr<MappedFile> file) {
  FileCursor cursor(file);
  KUIPER_ASSIGN_OR_RETURN(LlamaConfig c, v0_config(*file, cursor));
  KUIPER_RETURN_IF_ERROR(expect_size(*file, v0_expected_size(c), c));
  Checkpoint ckpt{c, {}, "llama2.c v0 (fp32)", file->path(), {}};
  LlamaWeights& w = ckpt.weights;
  w.layers.resize(c.n_layers);
  KUIPER_ASSIGN_OR_RETURN(Tensor emb, cursor.take(DataType::kFP32, {c.vocab_size, c.dim}, "token embedding"));
  w.token_embedding = fp32_weight(std::move(emb));
  KUIPER_RETURN_IF_ERROR(take_layer_vectors(cursor, w.layers, &LlamaLayerWeights::attention_norm, c.dim, "attention norm"));
  KUIPER_RETURN_IF_ERROR(take_matrices(cursor, c, w));
  KUIPER_RETURN_IF_ERROR(take_layer_vectors(cursor, w.layers, &LlamaLayerWeights::ffn_norm, c.dim, "ffn norm"));
  KUIPER_RETURN_IF_ERROR(take_ffn(cursor, c, w));
  KUIPER_ASSIGN_OR_RETURN(w.final_norm, cursor.take(DataType::kFP32, {c.dim}, "final norm"));
  const size_t rope_table_bytes = static_cast<size_t>(c.max_seq_len) * c.head_dim() * sizeof(float);
  KUIPER_RETURN_IF_ERROR(cursor.skip(rope_table_bytes, "legacy RoPE tables"));
  KUIPER_RETURN_IF_ERROR(take_classifier(cursor, c, w));
  return ckpt;
}

// ---- v1 ------------------------------------------------------------------------------------
// Header: llama2c_header.h, version 1. Weights: attention norms, ffn norms, final norm,
// embedding, wq, wk, wv, wo, w1, w2, w3, then the classifier if unshared.

bool detect_v1(const std::shared_ptr<MappedFile>& file) { return has_llama2c_header(*file, 1); }

StatusOr<Checkpoint> load_v1(std::shared_ptr<MappedFile> file) {
  FileCursor cursor(file);
  KUIPER_ASSIGN_OR_RETURN(uint32_t magic, cursor.read<uint32_t>("magic"));
  KUIPER_ASSIGN_OR_RETURN(int32_t version, cursor.read<int32_t>("version"));
  if (magic != kLlama2cMagic) return invalid_format(file->path() + ": bad magic, not a llama2.c v1 file");
  if (version != 1) {
    return invalid_format(file->path() + ": llama2.c version " + std::to_string(version) +
                          ", expected 1");
  }
  KUIPER_ASSIGN_OR_RETURN(Llama2cHeader h, read_dims(cursor));
  KUIPER_ASSIGN_OR_RETURN(uint8_t shared, cursor.read<uint8_t>("shared classifier flag"));
  if (shared > 1) return invalid_format(file->path() + ": shared-classifier flag is " + std::to_string(shared));
  KUIPER_ASSIGN_OR_RETURN(LlamaConfig c, config_from(h, shared == 1, file->path()));
  KUIPER_RETURN_IF_ERROR(expect_size(*file, kLlama2cHeaderBytes + weight_floats(c) * sizeof(float), c));
  KUIPER_RETURN_IF_ERROR(cursor.seek(kLlama2cHeaderBytes));

  Checkpoint ckpt{c, {}, "llama2.c v1 (fp32)", file->path(), {}};
  LlamaWeights& w = ckpt.weights;
  w.layers.resize(c.n_layers);
  KUIPER_RETURN_IF_ERROR(take_layer_vectors(cursor, w.layers, &LlamaLayerWeights::attention_norm, c.dim, "attention norm"));
  KUIPER_RETURN_IF_ERROR(take_layer_vectors(cursor, w.layers, &LlamaLayerWeights::ffn_norm, c.dim, "ffn norm"));
  KUIPER_ASSIGN_OR_RETURN(w.final_norm, cursor.take(DataType::kFP32, {c.dim}, "final norm"));
  KUIPER_ASSIGN_OR_RETURN(Tensor emb, cursor.take(DataType::kFP32, {c.vocab_size, c.dim}, "token embedding"));
  w.token_embedding = fp32_weight(std::move(emb));
  KUIPER_RETURN_IF_ERROR(take_matrices(cursor, c, w));
  KUIPER_RETURN_IF_ERROR(take_ffn(cursor, c, w));
  KUIPER_RETURN_IF_ERROR(take_classifier(cursor, c, w));
  return ckpt;
}

}  // namespace

const CheckpointFormat& llama2c_v0_format() {
  static const CheckpointFormat format{"llama2c-v0", detect_v0, load_v0};
  return format;
}

const CheckpointFormat& llama2c_v1_format() {
  static const CheckpointFormat format{"llama2c-v1", detect_v1, load_v1};
  return format;
}

}  // namespace kuiper
