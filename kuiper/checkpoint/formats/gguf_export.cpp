#include "kuiper/checkpoint/formats/gguf_export.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "kuiper/base/half.h"
#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/checkpoint/formats/gguf_layout.h"
#include "kuiper/checkpoint/formats/gguf_tokenizer_metadata.h"
#include "kuiper/checkpoint/formats/gguf_writer.h"
#include "kuiper/model/float_convert.h"

namespace kuiper {
namespace {

// llama.cpp's general.file_type values (LLAMA_FTYPE_*).
constexpr uint32_t kFileTypeF32 = 0, kFileTypeF16 = 1, kFileTypeQ8_0 = 7, kFileTypeBF16 = 32;

std::string architecture(const LlamaConfig& c) {
  if (c.qk_norm) return "qwen3";
  if (c.qkv_bias && !c.output_bias && !c.mlp_bias) return "qwen2";
  return "llama";
}

StatusOr<std::string> host_bytes(const Tensor& t) {
  KUIPER_ASSIGN_OR_RETURN(Tensor host, t.device() == DeviceType::kCPU ? StatusOr<Tensor>(t) : t.to(cpu_allocator()));
  return std::string(static_cast<const char*>(host.raw_data()), host.nbytes());
}

// Q8_0 blocks: each group's scale as fp16, then its 32 values.
StatusOr<std::string> q8_0_bytes(const op::Weight& w) {
  KUIPER_ASSIGN_OR_RETURN(std::string values, host_bytes(w.values));
  KUIPER_ASSIGN_OR_RETURN(Tensor scales, w.scales.device() == DeviceType::kCPU ? StatusOr<Tensor>(w.scales)
                                                                               : w.scales.to(cpu_allocator()));
  const int64_t blocks = scales.numel();
  std::string out(blocks * kQ8_0BlockBytes, '\0');
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t scale = float_to_fp16(scales.data<float>()[b]);
    std::memcpy(&out[b * kQ8_0BlockBytes], &scale, 2);
    std::memcpy(&out[b * kQ8_0BlockBytes + 2], values.data() + b * kQ8_0BlockWeights, kQ8_0BlockWeights);
  }
  return out;
}

StatusOr<GgmlType> matrix_type(const op::Weight& w, const std::string& name) {
  switch (w.dtype()) {
    case DataType::kFP32: return GgmlType::kF32;
    case DataType::kFP16: return GgmlType::kF16;
    case DataType::kBF16: return GgmlType::kBF16;
    case DataType::kINT8: break;
    default: return unsupported(name + " is " + std::string(dtype_name(w.dtype())) + ", which GGUF does not hold");
  }
  if (w.group_size != kQ8_0BlockWeights) {
    return unsupported(name + ": GGUF's Q8_0 has groups of 32, this int8 matrix groups of " +
                       std::to_string(w.group_size) + " (export with --group-size 32)");
  }
  if (w.cols() % kQ8_0BlockWeights != 0) {
    return unsupported(name + ": GGUF's Q8_0 needs rows of whole groups of 32, this matrix is [" +
                       std::to_string(w.rows()) + ", " + std::to_string(w.cols()) + "] (export it as fp16 or bf16)");
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor scales, w.scales.device() == DeviceType::kCPU ? StatusOr<Tensor>(w.scales)
                                                                               : w.scales.to(cpu_allocator()));
  for (int64_t i = 0; i < scales.numel(); ++i) {
    if (!(std::fabs(scales.data<float>()[i]) <= 65504.f)) {
      return unsupported(name + ": scale " + std::to_string(scales.data<float>()[i]) + " does not fit Q8_0's fp16");
    }
  }
  return GgmlType::kQ8_0;
}

class ModelWriter {
 public:
  explicit ModelWriter(GgufWriter& writer) : writer_(writer) {}

  Status matrix(const std::string& name, const std::string& kuiper_name, const op::Weight& w) {
    KUIPER_ASSIGN_OR_RETURN(GgmlType type, matrix_type(w, kuiper_name));
    if (file_type_ && *file_type_ != type) {
      return unsupported(kuiper_name + " is stored unlike the other matrices; convert the checkpoint to one format first");
    }
    file_type_ = type;
    const size_t nbytes = type == GgmlType::kQ8_0 ? w.values.numel() / kQ8_0BlockWeights * kQ8_0BlockBytes : w.values.nbytes();
    writer_.add_tensor(name, type, {w.rows(), w.cols()}, nbytes,
                       [w, type]() { return type == GgmlType::kQ8_0 ? q8_0_bytes(w) : host_bytes(w.values); });
    return ok_status();
  }

  Status vector(const std::string& name, const Tensor& v) {
    KUIPER_ASSIGN_OR_RETURN(Tensor fp32, place_fp32(v, cpu_allocator()));
    writer_.add_tensor(name, GgmlType::kF32, {fp32.numel()}, fp32.nbytes(), [fp32]() { return host_bytes(fp32); });
    return ok_status();
  }

  uint32_t file_type() const {
    switch (file_type_.value_or(GgmlType::kF32)) {
      case GgmlType::kF16: return kFileTypeF16;
      case GgmlType::kBF16: return kFileTypeBF16;
      case GgmlType::kQ8_0: return kFileTypeQ8_0;
      default: return kFileTypeF32;
    }
  }

 private:
  GgufWriter& writer_;
  std::optional<GgmlType> file_type_;
};

void add_hyper_parameters(GgufWriter& w, const LlamaConfig& c, const std::string& arch) {
  const std::string p = arch + ".";
  w.add_uint32(p + "context_length", c.max_seq_len);
  w.add_uint32(p + "embedding_length", c.dim);
  w.add_uint32(p + "block_count", c.n_layers);
  w.add_uint32(p + "feed_forward_length", c.hidden_dim);
  w.add_uint32(p + "attention.head_count", c.n_heads);
  w.add_uint32(p + "attention.head_count_kv", c.n_kv_heads);
  w.add_float32(p + "attention.layer_norm_rms_epsilon", c.norm_eps);
  w.add_float32(p + "rope.freq_base", c.rope_theta);
  w.add_uint32(p + "rope.dimension_count", c.head_dim());
  w.add_uint32(p + "vocab_size", c.vocab_size);
  if (c.head_size > 0) {
    w.add_uint32(p + "attention.key_length", c.head_dim());
    w.add_uint32(p + "attention.value_length", c.head_dim());
  }
  if (c.rope_scaling.enabled) {
    w.add_uint32(p + "rope.scaling.original_context_length", c.rope_scaling.original_max_positions);
  }
}

}  // namespace

Status save_gguf(const Checkpoint& checkpoint, const GgufExportOptions& options, const std::string& path) {
  const LlamaConfig& c = checkpoint.config;
  KUIPER_RETURN_IF_ERROR(c.validate());
  if (c.sliding_window > 0) return unsupported("GGUF's llama architecture has no sliding window; this model has one");
  if (c.rope_scaling.enabled && (c.rope_scaling.low_freq_factor != 1.f || c.rope_scaling.high_freq_factor != 4.f)) {
    return unsupported("kuiper reads LLaMA 3 scaling from GGUF with low/high frequency factors 1 and 4 only");
  }
  const std::string arch = architecture(c);
  const bool hf_order = gguf_qk_in_hf_order(arch);
  GgufWriter writer;
  writer.add_string("general.architecture", arch);
  if (!options.name.empty()) writer.add_string("general.name", options.name);
  add_hyper_parameters(writer, c, arch);

  Checkpoint ckpt = checkpoint;  // views only; the name lists need a mutable one
  LlamaWeights& w = ckpt.weights;
  ModelWriter model(writer);
  KUIPER_RETURN_IF_ERROR(model.matrix("token_embd.weight", "token_embedding", w.token_embedding));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayerWeights& layer = w.layers[l];
    for (size_t m = 0; m < std::size(kLayerMatrices); ++m) {
      op::Weight weight = layer.*kLayerMatrices[m].member;
      if (hf_order && &(layer.*kLayerMatrices[m].member) == &layer.wq) {
        KUIPER_ASSIGN_OR_RETURN(weight, reorder_rope_weight(weight, c.n_heads, /*to_interleaved=*/false));
      }
      if (hf_order && &(layer.*kLayerMatrices[m].member) == &layer.wk) {
        KUIPER_ASSIGN_OR_RETURN(weight, reorder_rope_weight(weight, c.n_kv_heads, /*to_interleaved=*/false));
      }
      KUIPER_RETURN_IF_ERROR(model.matrix(gguf_layer_tensor(l, std::string(kGgufLayerMatrixNames[m]) + ".weight"),
                                          "layers." + std::to_string(l) + "." + kLayerMatrices[m].name, weight));
    }
    for (const GgufLayerVector& v : gguf_layer_vectors(c)) {
      Tensor t = layer.*v.member;
      if (hf_order && v.rope_heads > 0) {
        KUIPER_ASSIGN_OR_RETURN(t, reorder_rope_vector(t, v.rope_heads, /*to_interleaved=*/false));
      }
      KUIPER_RETURN_IF_ERROR(model.vector(gguf_layer_tensor(l, v.suffix), t));
    }
  }
  KUIPER_RETURN_IF_ERROR(model.vector("output_norm.weight", w.final_norm));
  if (!c.shared_classifier) KUIPER_RETURN_IF_ERROR(model.matrix("output.weight", "classifier", w.classifier));
  if (c.rope_scaling.enabled) {
    const std::vector<float> factors = llama3_rope_factors(c);
    KUIPER_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DataType::kFP32, {static_cast<int64_t>(factors.size())}, cpu_allocator()));
    std::memcpy(t.raw_data(), factors.data(), t.nbytes());
    KUIPER_RETURN_IF_ERROR(model.vector(kGgufRopeFactors, t));
  }
  writer.add_uint32("general.file_type", model.file_type());
  if (model.file_type() == kFileTypeQ8_0) writer.add_uint32("general.quantization_version", 2);

  if (!options.tokenizer_path.empty()) KUIPER_RETURN_IF_ERROR(add_gguf_tokenizer(writer, options.tokenizer_path, c));
  // A GGUF tokenizer copied above may carry its own template.
  if (!options.chat_template.empty() && !writer.has_key("tokenizer.chat_template")) {
    writer.add_string("tokenizer.chat_template", options.chat_template);
  }
  return writer.write(path);
}

}  // namespace kuiper
