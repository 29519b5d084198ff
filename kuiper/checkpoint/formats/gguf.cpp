// GGUF checkpoints (llama.cpp): the `llama`, `qwen2` and `qwen3` architectures, tensors F32,
// F16, BF16 (zero-copy views of the mapping) and ggml's block types (copied into kuiper's
// int8/int4 layouts, exactly except Q5_1/Q5_K, which are requantized: gguf_blocks.h). The config comes from the {arch}.*
// metadata keys; tensor names and q/k layouts from gguf_layout.h.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include <glog/logging.h>

#include "kuiper/checkpoint/formats/formats.h"
#include "kuiper/checkpoint/formats/gguf_blocks.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/checkpoint/formats/gguf_layout.h"
#include "kuiper/checkpoint/formats/layer_tensors.h"
#include "kuiper/model/finite_values.h"
#include "kuiper/model/float_convert.h"

namespace kuiper {
namespace {

// An integer hyper-parameter that must be a positive int.
StatusOr<int> positive_int(const GgufFile& f, const std::string& key) {
  KUIPER_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v == 0 || v > INT32_MAX) return invalid_format(f.path() + ": metadata key '" + key + "' is " + std::to_string(v));
  return static_cast<int>(v);
}

// A float hyper-parameter that must be finite and positive once stored as a float (a double
// beyond FLT_MAX becomes infinity there).
StatusOr<float> positive_float(const GgufFile& f, const std::string& key) {
  KUIPER_ASSIGN_OR_RETURN(double v, f.get_float(key));
  const float stored = static_cast<float>(v);
  if (!(std::isfinite(stored) && stored > 0.f)) {
    return invalid_format(f.path() + ": metadata key '" + key + "' is " + std::to_string(v) +
                          " (it must be a finite number > 0)");
  }
  return stored;
}

// The pre-scaling context LLaMA 3 scaling was set up for, read off a factor of the smoothly
// interpolated band (wavelengths between original/high and original/low): there
// factor_i = 1 / ((1 - s) / factor + s) with s = (original / wavelength_i - low) / (high - low).
std::optional<int> original_context_from_factors(const LlamaConfig& c, const std::vector<float>& factors) {
  LlamaConfig unscaled = c;
  unscaled.rope_scaling.enabled = false;
  const std::vector<float> inv_freq = rope_inverse_frequencies(unscaled);
  const RopeScaling& r = c.rope_scaling;
  for (size_t i = 0; i < factors.size(); ++i) {
    if (factors[i] > 1.f + 1e-4f && factors[i] < r.factor * (1.f - 1e-4f)) {
      const double s = (1.0 / factors[i] - 1.0 / r.factor) / (1.0 - 1.0 / r.factor);
      const double wavelength = 2.0 * 3.14159265358979323846 / inv_freq[i];
      return static_cast<int>(std::lround(wavelength * (r.low_freq_factor + s * (r.high_freq_factor - r.low_freq_factor))));
    }
  }
  return std::nullopt;
}

// rope_freqs.weight as kuiper's LLaMA 3 scaling. llama.cpp keeps only the per-frequency
// factors, so the parameters are recovered (factor: the largest; low 1 and high 4 as in every
// Meta model; the original context from the metadata, else from the factors, else 8192) and
// must reproduce every factor.
Status read_rope_factors(const GgufFile& f, const std::string& arch, const std::vector<float>& factors, LlamaConfig& c) {
  if (factors.size() != static_cast<size_t>(c.head_dim() / 2)) {
    return invalid_format(f.path() + ": " + kGgufRopeFactors + " has " + std::to_string(factors.size()) +
                          " factors, the heads need " + std::to_string(c.head_dim() / 2));
  }
  c.rope_scaling.enabled = true;
  c.rope_scaling.factor = *std::max_element(factors.begin(), factors.end());
  const std::string original_key = arch + ".rope.scaling.original_context_length";
  if (f.find(original_key)) {
    KUIPER_ASSIGN_OR_RETURN(c.rope_scaling.original_max_positions, positive_int(f, original_key));
  } else if (const std::optional<int> original = original_context_from_factors(c, factors)) {
    c.rope_scaling.original_max_positions = *original;
  }
  const std::vector<float> expected = llama3_rope_factors(c);
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!(std::fabs(expected[i] - factors[i]) <= 1e-4f * std::fabs(factors[i]))) {
      return unsupported(f.path() + ": " + kGgufRopeFactors + "[" + std::to_string(i) + "] is " +
                         std::to_string(factors[i]) + ", which LLaMA 3 scaling (factor " +
                         std::to_string(c.rope_scaling.factor) + ", low 1, high 4, original context " +
                         std::to_string(c.rope_scaling.original_max_positions) + ") does not give");
    }
  }
  return ok_status();
}

StatusOr<LlamaConfig> read_config(const GgufFile& f, std::string& arch) {
  KUIPER_ASSIGN_OR_RETURN(std::string_view arch_view, f.get_string("general.architecture"));
  arch = std::string(arch_view);
  if (std::find(std::begin(kGgufArchitectures), std::end(kGgufArchitectures), arch) == std::end(kGgufArchitectures)) {
    return unsupported(f.path() + ": architecture '" + arch + "' is not one kuiper runs (llama, qwen2, qwen3)");
  }
  const std::string p = arch + ".";
  LlamaConfig c;
  KUIPER_ASSIGN_OR_RETURN(c.dim, positive_int(f, p + "embedding_length"));
  KUIPER_ASSIGN_OR_RETURN(c.hidden_dim, positive_int(f, p + "feed_forward_length"));
  KUIPER_ASSIGN_OR_RETURN(c.n_layers, positive_int(f, p + "block_count"));
  KUIPER_ASSIGN_OR_RETURN(c.n_heads, positive_int(f, p + "attention.head_count"));
  c.n_kv_heads = c.n_heads;
  if (f.find(p + "attention.head_count_kv")) {
    KUIPER_ASSIGN_OR_RETURN(c.n_kv_heads, positive_int(f, p + "attention.head_count_kv"));
  }
  KUIPER_ASSIGN_OR_RETURN(c.max_seq_len, positive_int(f, p + "context_length"));
  KUIPER_ASSIGN_OR_RETURN(c.norm_eps, positive_float(f, p + "attention.layer_norm_rms_epsilon"));
  if (f.find(p + "rope.freq_base")) {
    KUIPER_ASSIGN_OR_RETURN(c.rope_theta, positive_float(f, p + "rope.freq_base"));
  }
  if (f.find(p + "attention.key_length")) {
    KUIPER_ASSIGN_OR_RETURN(c.head_size, positive_int(f, p + "attention.key_length"));
    if (f.find(p + "attention.value_length")) {
      KUIPER_ASSIGN_OR_RETURN(int value_length, positive_int(f, p + "attention.value_length"));
      if (value_length != c.head_size) {
        return unsupported(f.path() + ": attention.value_length " + std::to_string(value_length) +
                           " differs from key_length " + std::to_string(c.head_size));
      }
    }
  }
  if (f.find(p + "rope.dimension_count")) {
    KUIPER_ASSIGN_OR_RETURN(int rotated, positive_int(f, p + "rope.dimension_count"));
    if (rotated != c.head_dim()) {
      return unsupported(f.path() + ": rope.dimension_count " + std::to_string(rotated) +
                         " rotates part of each head; kuiper rotates whole heads of " + std::to_string(c.head_dim()));
    }
  }
  if (f.find(p + "rope.scaling.type")) {
    KUIPER_ASSIGN_OR_RETURN(std::string_view scaling, f.get_string(p + "rope.scaling.type"));
    if (scaling != "none") {
      return unsupported(f.path() + ": rope.scaling.type '" + std::string(scaling) +
                         "' (kuiper runs LLaMA 3 scaling, given as " + kGgufRopeFactors + ", and none)");
    }
  }
  if (f.find("tokenizer.ggml.bos_token_id")) {
    KUIPER_ASSIGN_OR_RETURN(uint64_t bos, f.get_uint("tokenizer.ggml.bos_token_id"));
    c.bos_id = static_cast<int32_t>(bos);
  }
  std::vector<int32_t> eos_ids;  // kept at the default where the file names none
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    if (!f.find(key)) continue;
    KUIPER_ASSIGN_OR_RETURN(uint64_t eos, f.get_uint(key));
    if (std::find(eos_ids.begin(), eos_ids.end(), eos) == eos_ids.end()) eos_ids.push_back(static_cast<int32_t>(eos));
  }
  if (!eos_ids.empty()) c.eos_ids = eos_ids;
  // The switches follow the tensors present, as llama.cpp's loader treats them as optional.
  c.qkv_bias = f.tensor(gguf_layer_tensor(0, "attn_q.bias")) != nullptr;
  c.output_bias = f.tensor(gguf_layer_tensor(0, "attn_output.bias")) != nullptr;
  c.mlp_bias = f.tensor(gguf_layer_tensor(0, "ffn_gate.bias")) != nullptr;
  c.qk_norm = f.tensor(gguf_layer_tensor(0, "attn_q_norm.weight")) != nullptr;
  c.shared_classifier = f.tensor("output.weight") == nullptr;
  const GgufTensorInfo* embedding = f.tensor("token_embd.weight");
  if (embedding == nullptr) return not_found(f.path() + ": tensor token_embd.weight is missing");
  if (embedding->dims.size() != 2 || embedding->dims[1] > INT32_MAX) {
    return invalid_format(f.path() + ": tensor token_embd.weight is not a matrix");
  }
  c.vocab_size = static_cast<int>(embedding->dims[1]);
  if (f.find(p + "vocab_size")) {
    KUIPER_ASSIGN_OR_RETURN(uint64_t vocab, f.get_uint(p + "vocab_size"));
    if (vocab != static_cast<uint64_t>(c.vocab_size)) {
      return invalid_format(f.path() + ": " + p + "vocab_size is " + std::to_string(vocab) +
                            " but token_embd.weight has " + std::to_string(c.vocab_size) + " rows");
    }
  }
  if (c.head_size == c.dim / c.n_heads && c.dim % c.n_heads == 0) c.head_size = 0;
  const Status valid = c.validate();
  if (!valid.ok()) return invalid_format(f.path() + ": " + valid.message());
  return c;
}

// Hands out the file's tensors in kuiper's shapes and dtypes, remembering which were read.
class TensorReader {
 public:
  explicit TensorReader(const GgufFile& file)
      : file_(file),
        mapping_(Buffer::borrow(const_cast<uint8_t*>(file.file()->data()), file.file()->size(), DeviceType::kCPU,
                                file.file())) {}

  StatusOr<op::Weight> matrix(const std::string& name, int64_t rows, int64_t cols) {
    KUIPER_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find(name, {cols, rows}));
    switch (static_cast<GgmlType>(t->type)) {
      case GgmlType::kF32: return float_view(*t, DataType::kFP32, rows, cols);
      case GgmlType::kF16: return float_view(*t, DataType::kFP16, rows, cols);
      case GgmlType::kBF16: return float_view(*t, DataType::kBF16, rows, cols);
      default: break;
    }
    if (!gguf_blocks_readable(t->type)) return unsupported_type(*t);
    RequantizationError error;
    KUIPER_ASSIGN_OR_RETURN(op::Weight w, decode_gguf_blocks(t->type, file_.file()->data() + t->offset, rows, cols,
                                                             file_.path() + ": tensor " + t->name, &error));
    if (gguf_blocks_requantized(t->type)) {
      requantized_types_.insert(ggml_type_name(t->type));
      ++requantized_matrices_;
      if (error.max_weight > 0) largest_relative_error_ = std::max(largest_relative_error_, error.max_error / error.max_weight);
    }
    return w;
  }

  // One line for all the matrices requantized on reading, if any.
  void report_requantization() const {
    if (requantized_matrices_ == 0) return;
    std::string types;
    for (const std::string& t : requantized_types_) types += (types.empty() ? "" : ", ") + t;
    LOG(WARNING) << file_.path() << ": " << requantized_matrices_ << " " << types
                 << " matrices requantized to int8 (groups of 32; kuiper's int8 has no minimum); largest added error "
                 << 100 * largest_relative_error_ << "% of its matrix's largest weight";
  }

  // A 1-D float tensor as fp32.
  StatusOr<Tensor> vector(const std::string& name, int64_t n) {
    KUIPER_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find(name, {n}));
    DataType dtype;
    switch (static_cast<GgmlType>(t->type)) {
      case GgmlType::kF32: dtype = DataType::kFP32; break;
      case GgmlType::kF16: dtype = DataType::kFP16; break;
      case GgmlType::kBF16: dtype = DataType::kBF16; break;
      default: return unsupported_type(*t);
    }
    KUIPER_ASSIGN_OR_RETURN(Tensor view, Tensor::view(mapping_, t->offset, dtype, {n}));
    KUIPER_ASSIGN_OR_RETURN(Tensor values, place_fp32(view, cpu_allocator()));
    // Named as in the file here; load_checkpoint's check of the small tensors has kuiper's names.
    KUIPER_RETURN_IF_ERROR(check_all_finite(values.data<float>(), n, file_.path() + ": tensor " + name));
    return values;
  }

  std::vector<std::string> unused() const {
    std::vector<std::string> names;
    for (const GgufTensorInfo& t : file_.tensors()) {
      if (!used_.count(t.name)) names.push_back(t.name);
    }
    return names;
  }

 private:
  StatusOr<const GgufTensorInfo*> find(const std::string& name, const std::vector<int64_t>& dims) {
    const GgufTensorInfo* t = file_.tensor(name);
    if (t == nullptr) return not_found(file_.path() + ": tensor " + name + " is missing");
    used_.insert(name);
    if (t->dims != dims) {
      return invalid_format(file_.path() + ": tensor " + name + " has dims " + dims_text(t->dims) +
                            " but the metadata implies " + dims_text(dims));
    }
    return t;
  }

  static std::string dims_text(const std::vector<int64_t>& dims) {
    std::string s = "{";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "}";
  }

  Status unsupported_type(const GgufTensorInfo& t) const {
    return unsupported(file_.path() + ": tensor " + t.name + " has type " + ggml_type_name(t.type) +
                       ", which kuiper does not read yet (it reads F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, "
                       "IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS)");
  }

  StatusOr<op::Weight> float_view(const GgufTensorInfo& t, DataType dtype, int64_t rows, int64_t cols) {
    KUIPER_ASSIGN_OR_RETURN(Tensor view, Tensor::view(mapping_, t.offset, dtype, {rows, cols}));
    return op::Weight{std::move(view), Tensor(), 0};
  }

  const GgufFile& file_;
  std::shared_ptr<Buffer> mapping_;
  std::set<std::string> used_;
  std::set<std::string> requantized_types_;
  int requantized_matrices_ = 0;
  double largest_relative_error_ = 0;
};

Status load_layer(TensorReader& reader, const LlamaConfig& c, bool hf_order, int l, LlamaLayerWeights& layer) {
  for (size_t m = 0; m < std::size(kLayerMatrices); ++m) {
    const MatrixShape shape = layer_matrix_shape(c, kLayerMatrices[m]);
    op::Weight& w = layer.*kLayerMatrices[m].member;
    KUIPER_ASSIGN_OR_RETURN(w, reader.matrix(gguf_layer_tensor(l, std::string(kGgufLayerMatrixNames[m]) + ".weight"),
                                             shape.rows, shape.cols));
    if (hf_order && &w == &layer.wq) {
      KUIPER_ASSIGN_OR_RETURN(w, reorder_rope_weight(w, c.n_heads, /*to_interleaved=*/true));
    }
    if (hf_order && &w == &layer.wk) {
      KUIPER_ASSIGN_OR_RETURN(w, reorder_rope_weight(w, c.n_kv_heads, /*to_interleaved=*/true));
    }
  }
  for (const GgufLayerVector& v : gguf_layer_vectors(c)) {
    Tensor& t = layer.*v.member;
    KUIPER_ASSIGN_OR_RETURN(t, reader.vector(gguf_layer_tensor(l, v.suffix), v.length));
    if (hf_order && v.rope_heads > 0) {
      KUIPER_ASSIGN_OR_RETURN(t, reorder_rope_vector(t, v.rope_heads, /*to_interleaved=*/true));
    }
  }
  return ok_status();
}

bool detect_gguf(const std::shared_ptr<MappedFile>& file) { return GgufFile::has_magic(*file); }

StatusOr<Checkpoint> load_gguf(std::shared_ptr<MappedFile> mapped) {
  KUIPER_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(std::move(mapped)));
  std::string arch;
  KUIPER_ASSIGN_OR_RETURN(LlamaConfig c, read_config(file, arch));
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : file.tensors()) names.push_back(t.name);
  KUIPER_RETURN_IF_ERROR(check_layer_tensors(names, "blk.", c.n_layers, "metadata key '" + arch + ".block_count'",
                                             file.path()));
  TensorReader reader(file);
  if (file.tensor(kGgufRopeFactors)) {
    KUIPER_ASSIGN_OR_RETURN(Tensor factors, reader.vector(kGgufRopeFactors, c.head_dim() / 2));
    const float* data = factors.data<float>();
    KUIPER_RETURN_IF_ERROR(read_rope_factors(file, arch, std::vector<float>(data, data + factors.numel()), c));
  }
  Checkpoint ckpt{c, {}, "", file.path(), {}};
  LlamaWeights& w = ckpt.weights;
  KUIPER_ASSIGN_OR_RETURN(w.token_embedding, reader.matrix("token_embd.weight", c.vocab_size, c.dim));
  w.layers.resize(c.n_layers);
  const bool hf_order = gguf_qk_in_hf_order(arch);
  for (int l = 0; l < c.n_layers; ++l) KUIPER_RETURN_IF_ERROR(load_layer(reader, c, hf_order, l, w.layers[l]));
  KUIPER_ASSIGN_OR_RETURN(w.final_norm, reader.vector("output_norm.weight", c.dim));
  if (c.shared_classifier) {
    w.classifier = w.token_embedding;
  } else {
    KUIPER_ASSIGN_OR_RETURN(w.classifier, reader.matrix("output.weight", c.vocab_size, c.dim));
  }
  reader.report_requantization();
  for (const std::string& name : reader.unused()) {
    LOG(WARNING) << file.path() << ": tensor '" << name << "' is not used by the model";
    ckpt.ignored_tensors.push_back(name);
  }
  const GgufTensorInfo* wq = file.tensor(gguf_layer_tensor(0, "attn_q.weight"));
  ckpt.format = "GGUF v" + std::to_string(file.version()) + " (" + arch + ", " + ggml_type_name(wq->type) + ")";
  return ckpt;
}

}  // namespace

const CheckpointFormat& gguf_format() {
  static const CheckpointFormat format{"gguf", detect_gguf, load_gguf};
  return format;
}

}  // namespace kuiper
