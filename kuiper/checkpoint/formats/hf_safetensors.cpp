#include "kuiper/checkpoint/formats/hf_safetensors.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "kuiper/base/regular_file.h"
#include "kuiper/checkpoint/formats/formats.h"
#include "kuiper/checkpoint/formats/hf_config.h"
#include "kuiper/checkpoint/formats/layer_tensors.h"
#include "kuiper/checkpoint/formats/safetensors.h"
#include "kuiper/model/float_convert.h"
#include "kuiper/model/weight_convert.h"

namespace kuiper {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

bool is_float(DataType d) { return d == DataType::kFP32 || d == DataType::kFP16 || d == DataType::kBF16; }

// Whether a file of the model directory is there; one that is there but unreadable (a FIFO, a
// symlink loop) counts as present, so that opening it reports why.
bool present(const fs::path& path) { return check_regular_file(path.string()).code() != StatusCode::kNotFound; }

// The safetensors files of a model and which of them holds each tensor.
class WeightFiles {
 public:
  static StatusOr<WeightFiles> open(const fs::path& dir) {
    WeightFiles files;
    if (present(dir / kIndexFile)) {
      KUIPER_RETURN_IF_ERROR(files.open_shards(dir, (dir / kIndexFile).string()));
    } else if (present(dir / kSingleFile)) {
      KUIPER_RETURN_IF_ERROR(files.add_file((dir / kSingleFile).string()));
    } else {
      return not_found(dir.string() + ": no " + kSingleFile + " or " + kIndexFile +
                       " (only safetensors weights are read)");
    }
    files.dir_ = dir.string();
    return files;
  }

  // `name` as a float tensor of exactly `shape` (the config's dimensions).
  StatusOr<Tensor> get(const std::string& name, const Shape& shape) const {
    used_.insert(name);
    const auto it = location_.find(name);
    if (it == location_.end()) {
      return not_found(dir_ + ": tensor " + in_quotes(name) + " is missing from " + describe());
    }
    const SafetensorsFile& file = files_[it->second];
    KUIPER_ASSIGN_OR_RETURN(Tensor t, file.tensor(name));
    if (!is_float(t.dtype())) {
      return unsupported(file.path() + ": tensor " + in_quotes(name) + " is " + std::string(dtype_name(t.dtype())) +
                         "; LLaMA weights must be F32, F16 or BF16");
    }
    if (t.shape() != shape) {
      return invalid_format(file.path() + ": tensor " + in_quotes(name) + " has shape " + shape_to_string(t.shape()) +
                            " but config.json implies " + shape_to_string(shape));
    }
    return t;
  }

  // Tensors the files hold that no get() asked for, in name order.
  std::vector<std::string> unused() const {
    std::vector<std::string> names;
    for (const auto& [name, file] : location_) {
      if (!used_.count(name)) names.push_back(name);
    }
    return names;
  }
  void mark_used(const std::string& name) const { used_.insert(name); }

  std::string describe() const {
    return files_.size() == 1 ? fs::path(files_.front().path()).filename().string()
                              : std::to_string(files_.size()) + " shards";
  }

 private:
  Status add_file(const std::string& path) {
    KUIPER_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
    for (const std::string& name : file.names()) location_[name] = files_.size();
    files_.push_back(std::move(file));
    return ok_status();
  }

  // The index maps every tensor name to a shard file in the same directory.
  Status open_shards(const fs::path& dir, const std::string& index_path) {
    KUIPER_ASSIGN_OR_RETURN(const std::string text, read_regular_file(index_path));
    json index;
    try {
      index = json::parse(text);
    } catch (const json::exception& e) {
      return invalid_format(index_path + ": not valid JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return invalid_format(index_path + ": no weight_map object");
    }
    std::map<std::string, size_t> shard_number;
    for (const auto& [tensor, shard_json] : index["weight_map"].items()) {
      if (!shard_json.is_string()) return invalid_format(index_path + ": shard of " + in_quotes(tensor) + " is not a string");
      const std::string shard = shard_json.get<std::string>();
      // The index is untrusted: it may only name files beside it.
      if (shard.empty() || fs::path(shard).filename() != fs::path(shard) || shard == "." || shard == "..") {
        return invalid_format(index_path + ": shard name " + in_quotes(shard) + " is not a file name in the model directory");
      }
      if (!shard_number.count(shard)) {
        const std::string path = (dir / shard).string();
        StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
        if (!file.ok()) {
          return Status(file.status().code(), index_path + " lists shard " + in_quotes(shard) +
                                                  ", which cannot be read: " + file.status().message());
        }
        shard_number[shard] = files_.size();
        files_.push_back(std::move(file).value());
      }
      const SafetensorsFile& file = files_[shard_number[shard]];
      if (file.find(tensor) == nullptr) {
        return invalid_format(index_path + " puts tensor " + in_quotes(tensor) + " in " + in_quotes(shard) +
                              ", which does not hold it");
      }
      location_[tensor] = shard_number[shard];
    }
    return ok_status();
  }

  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> location_;  // tensor name -> index into files_
  mutable std::set<std::string> used_;
};

op::Weight float_weight(Tensor t) { return op::Weight{std::move(t), Tensor(), 0}; }

Status load_layer(const WeightFiles& files, const LlamaConfig& c, int l, LlamaLayerWeights& layer) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = int64_t{c.n_heads} * c.head_dim(), kv = c.kv_dim();
  const auto norm = [&](const std::string& name) -> StatusOr<Tensor> {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, files.get(p + name, {dim}));
    return place_fp32(t, cpu_allocator());  // norms are fp32 whatever the file holds
  };
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) -> StatusOr<op::Weight> {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, files.get(p + name, {rows, cols}));
    return float_weight(std::move(t));
  };
  const auto rope_matrix = [&](const std::string& name, int64_t rows, int heads) -> StatusOr<op::Weight> {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, files.get(p + name, {rows, dim}));
    KUIPER_ASSIGN_OR_RETURN(Tensor interleaved, unpermute_rope_rows(t, heads));
    return float_weight(std::move(interleaved));
  };
  KUIPER_ASSIGN_OR_RETURN(layer.attention_norm, norm("input_layernorm.weight"));
  KUIPER_ASSIGN_OR_RETURN(layer.wq, rope_matrix("self_attn.q_proj.weight", q_dim, c.n_heads));
  KUIPER_ASSIGN_OR_RETURN(layer.wk, rope_matrix("self_attn.k_proj.weight", kv, c.n_kv_heads));
  KUIPER_ASSIGN_OR_RETURN(layer.wv, matrix("self_attn.v_proj.weight", kv, dim));
  KUIPER_ASSIGN_OR_RETURN(layer.wo, matrix("self_attn.o_proj.weight", dim, q_dim));
  KUIPER_ASSIGN_OR_RETURN(layer.ffn_norm, norm("post_attention_layernorm.weight"));
  KUIPER_ASSIGN_OR_RETURN(layer.w1, matrix("mlp.gate_proj.weight", hidden, dim));
  KUIPER_ASSIGN_OR_RETURN(layer.w2, matrix("mlp.down_proj.weight", dim, hidden));
  KUIPER_ASSIGN_OR_RETURN(layer.w3, matrix("mlp.up_proj.weight", hidden, dim));

  // The switches' extra vectors, fp32. q and k ones follow their rows into the interleaved
  // RoPE layout: a bias element, like a row, moves with its output; a per-head norm weight
  // moves with the element of the head it scales.
  const auto vector = [&](const std::string& name, int64_t n) -> StatusOr<Tensor> {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, files.get(p + name, {n}));
    return place_fp32(t, cpu_allocator());
  };
  const auto rope_vector = [&](const std::string& name, int64_t n, int heads) -> StatusOr<Tensor> {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, files.get(p + name, {n}));
    KUIPER_ASSIGN_OR_RETURN(Tensor column, t.reshape({n, 1}));
    KUIPER_ASSIGN_OR_RETURN(Tensor interleaved, unpermute_rope_rows(column, heads));
    KUIPER_ASSIGN_OR_RETURN(Tensor flat, interleaved.reshape({n}));
    return place_fp32(flat, cpu_allocator());
  };
  if (c.qkv_bias) {
    KUIPER_ASSIGN_OR_RETURN(layer.bq, rope_vector("self_attn.q_proj.bias", q_dim, c.n_heads));
    KUIPER_ASSIGN_OR_RETURN(layer.bk, rope_vector("self_attn.k_proj.bias", kv, c.n_kv_heads));
    KUIPER_ASSIGN_OR_RETURN(layer.bv, vector("self_attn.v_proj.bias", kv));
  }
  if (c.output_bias) {
    KUIPER_ASSIGN_OR_RETURN(layer.bo, vector("self_attn.o_proj.bias", dim));
  }
  if (c.mlp_bias) {
    KUIPER_ASSIGN_OR_RETURN(layer.b1, vector("mlp.gate_proj.bias", hidden));
    KUIPER_ASSIGN_OR_RETURN(layer.b2, vector("mlp.down_proj.bias", dim));
    KUIPER_ASSIGN_OR_RETURN(layer.b3, vector("mlp.up_proj.bias", hidden));
  }
  if (c.qk_norm) {
    KUIPER_ASSIGN_OR_RETURN(layer.q_norm, rope_vector("self_attn.q_norm.weight", c.head_dim(), 1));
    KUIPER_ASSIGN_OR_RETURN(layer.k_norm, rope_vector("self_attn.k_norm.weight", c.head_dim(), 1));
  }
  return ok_status();
}

bool detect_safetensors(const std::shared_ptr<MappedFile>& file) {
  if (file->size() < 9) return false;
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file->data(), sizeof(header_bytes));
  return header_bytes <= kMaxSafetensorsHeaderBytes && header_bytes <= file->size() - 8 && file->data()[8] == '{';
}

StatusOr<Checkpoint> load_safetensors_file(std::shared_ptr<MappedFile> file) {
  return load_hf_checkpoint(fs::path(file->path()).parent_path().string());
}

}  // namespace

namespace {

// Moves rows between HF's order (row h·head_dim + s·half + i) and the interleaved one (row
// h·head_dim + 2i + s), either way.
StatusOr<Tensor> reorder_rope_rows(const Tensor& weight, int n_heads, bool to_interleaved) {
  if (weight.ndim() != 2 || n_heads <= 0 || weight.dim(0) % (2 * int64_t{n_heads}) != 0) {
    return invalid_argument("cannot reorder the rows of " + weight.describe() + " for " + std::to_string(n_heads) + " heads");
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor src, weight.device() == DeviceType::kCPU ? StatusOr<Tensor>(weight)
                                                                          : weight.to(cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(src.dtype(), src.shape(), cpu_allocator()));
  const int64_t head_dim = src.dim(0) / n_heads, half = head_dim / 2;
  const size_t row_bytes = static_cast<size_t>(src.dim(1)) * dtype_size(src.dtype());
  const auto* from = static_cast<const uint8_t*>(src.raw_data());
  auto* to = static_cast<uint8_t*>(out.raw_data());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t hf_row = h * head_dim + s * half + i, interleaved_row = h * head_dim + 2 * i + s;
        const int64_t dst = to_interleaved ? interleaved_row : hf_row, from_row = to_interleaved ? hf_row : interleaved_row;
        std::memcpy(to + dst * row_bytes, from + from_row * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

}  // namespace

StatusOr<Tensor> unpermute_rope_rows(const Tensor& hf_weight, int n_heads) {
  return reorder_rope_rows(hf_weight, n_heads, /*to_interleaved=*/true);
}

StatusOr<Tensor> permute_rope_rows(const Tensor& interleaved_weight, int n_heads) {
  return reorder_rope_rows(interleaved_weight, n_heads, /*to_interleaved=*/false);
}

StatusOr<Checkpoint> load_hf_checkpoint(const std::string& dir) {
  const fs::path root(dir);
  KUIPER_RETURN_IF_ERROR(check_directory(dir));
  if (!present(root / "config.json")) {
    return not_found(dir + ": no config.json (not a Hugging Face model directory)");
  }
  KUIPER_ASSIGN_OR_RETURN(LlamaConfig c, load_hf_llama_config((root / "config.json").string()));
  KUIPER_ASSIGN_OR_RETURN(WeightFiles files, WeightFiles::open(root));
  // Before any read, every tensor is unused.
  KUIPER_RETURN_IF_ERROR(
      check_layer_tensors(files.unused(), "model.layers.", c.n_layers, "num_hidden_layers in config.json", dir));

  Checkpoint ckpt{c, {}, "", dir, {}};
  LlamaWeights& w = ckpt.weights;
  KUIPER_ASSIGN_OR_RETURN(Tensor embedding, files.get("model.embed_tokens.weight", {c.vocab_size, c.dim}));
  w.token_embedding = float_weight(std::move(embedding));
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) KUIPER_RETURN_IF_ERROR(load_layer(files, c, l, w.layers[l]));
  KUIPER_ASSIGN_OR_RETURN(Tensor final_norm, files.get("model.norm.weight", {c.dim}));
  KUIPER_ASSIGN_OR_RETURN(w.final_norm, place_fp32(final_norm, cpu_allocator()));
  if (c.shared_classifier) {
    w.classifier = w.token_embedding;  // transformers ignores a stored lm_head when tied
    files.mark_used("lm_head.weight");
  } else {
    KUIPER_ASSIGN_OR_RETURN(Tensor classifier, files.get("lm_head.weight", {c.vocab_size, c.dim}));
    w.classifier = float_weight(std::move(classifier));
  }
  // As transformers does, name what the model leaves unread: a tensor of a part kuiper does
  // not run would otherwise change nothing, silently.
  for (const std::string& name : files.unused()) {
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // a cache older files saved; recomputed
    LOG(WARNING) << dir << ": tensor '" << name << "' is not used by the model";
    ckpt.ignored_tensors.push_back(name);
  }
  ckpt.format = "Hugging Face safetensors (" + std::string(dtype_name(w.layers.front().wq.dtype())) + ", " +
                files.describe() + ")";
  return ckpt;
}

const CheckpointFormat& hf_safetensors_format() {
  static const CheckpointFormat format{"hf-safetensors", detect_safetensors, load_safetensors_file};
  return format;
}

}  // namespace kuiper
