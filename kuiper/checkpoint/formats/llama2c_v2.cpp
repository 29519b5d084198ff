// llama2.c version 2 (Q8_0) checkpoints, as karpathy/llama2.c export.py writes them and
// runq.c reads them. Header (256 bytes): uint32 magic "ak42", int32 version = 2, 7 int32 dims,
// uint8 shared_classifier at byte 36, int32 group_size at byte 37 (packed), zero padding.
// Body: fp32 attention norms (all layers), ffn norms, final norm; then int8 values + fp32
// scales of the token embedding, wq (all layers), wk, wv, wo, w1, w2, w3 and, if not shared,
// the classifier.
#include "kuiper/checkpoint/formats/int8_file_layout.h"
#include "kuiper/checkpoint/formats/llama2c_header.h"
#include "kuiper/checkpoint/formats/formats.h"

namespace kuiper {
namespace {

bool detect_v2(const std::shared_ptr<MappedFile>& file) { return has_llama2c_header(*file, 2); }

StatusOr<Checkpoint> load_v2(std::shared_ptr<MappedFile> file) {
  const std::string& path = file->path();
  if (!detect_v2(file)) return invalid_format(path + ": not a llama2.c version 2 file (magic/version)");
  FileCursor cursor(file);
  KUIPER_RETURN_IF_ERROR(cursor.seek(8));
  KUIPER_ASSIGN_OR_RETURN(LlamaConfig c, read_int8_header_dims(cursor));
  KUIPER_ASSIGN_OR_RETURN(uint8_t shared, cursor.read<uint8_t>("shared classifier flag"));
  KUIPER_ASSIGN_OR_RETURN(int32_t group_size, cursor.read<int32_t>("group size"));
  if (shared > 1) return invalid_format(path + ": shared-classifier flag is " + std::to_string(shared));
  c.shared_classifier = shared == 1;
  const size_t matrices = int8_model_matrix_bytes(c, group_size, /*with_embedding=*/true);
  if (group_size <= 0 || matrices == 0) {
    return invalid_format(path + ": group size " + std::to_string(group_size) +
                          " does not divide the matrices of " + c.summary());
  }
  const size_t norms = (2 * size_t(c.n_layers) + 1) * c.dim * sizeof(float);
  if (file->size() != kLlama2cHeaderBytes + norms + matrices) {
    return invalid_format(path + ": file is " + std::to_string(file->size()) + " bytes but its header (" +
                          c.summary() + ", int8 groups of " + std::to_string(group_size) +
                          ") implies " + std::to_string(kLlama2cHeaderBytes + norms + matrices));
  }
  KUIPER_RETURN_IF_ERROR(cursor.seek(kLlama2cHeaderBytes));

  Checkpoint ckpt{c, {}, "llama2.c v2 (int8, groups of " + std::to_string(group_size) + ")", path, {}};
  LlamaWeights& w = ckpt.weights;
  w.layers.resize(c.n_layers);
  KUIPER_RETURN_IF_ERROR(take_fp32_norms(cursor, c, w));
  KUIPER_ASSIGN_OR_RETURN(w.token_embedding, take_int8_matrix(cursor, c.vocab_size, c.dim, group_size, "token embedding"));
  KUIPER_RETURN_IF_ERROR(take_int8_layer_matrices(cursor, c, group_size, w.layers));
  if (c.shared_classifier) {
    w.classifier = w.token_embedding;
  } else {
    KUIPER_ASSIGN_OR_RETURN(w.classifier, take_int8_matrix(cursor, c.vocab_size, c.dim, group_size, "classifier"));
  }
  return ckpt;
}

}  // namespace

const CheckpointFormat& llama2c_v2_format() {
  static const CheckpointFormat format{"llama2c-v2", detect_v2, load_v2};
  return format;
}

}  // namespace kuiper
