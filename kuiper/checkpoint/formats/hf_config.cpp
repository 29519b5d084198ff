#include "kuiper/checkpoint/formats/hf_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "kuiper/base/regular_file.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

// Reads typed fields of one JSON object, with errors naming the config and the key.
class Fields {
 public:
  Fields(const json& object, const std::string& source) : object_(object), source_(source) {}

  bool has(const char* key) const { return object_.contains(key) && !object_.at(key).is_null(); }
  const json& at(const char* key) const { return object_.at(key); }

  StatusOr<int> integer(const char* key) const {
    if (!has(key)) return error(std::string("missing ") + key);
    return as_int(at(key), key);
  }
  StatusOr<int> integer_or(const char* key, int fallback) const {
    return has(key) ? as_int(at(key), key) : StatusOr<int>(fallback);
  }
  StatusOr<float> number(const char* key) const {
    if (!has(key)) return error(std::string("missing ") + key);
    if (!at(key).is_number()) return error(std::string(key) + " is not a number");
    return static_cast<float>(at(key).get<double>());
  }
  StatusOr<float> number_or(const char* key, float fallback) const {
    return has(key) ? number(key) : StatusOr<float>(fallback);
  }
  // A number that must be finite and positive as a float (JSON's 1e999, or a double beyond
  // FLT_MAX, becomes infinity there).
  StatusOr<float> positive_number_or(const char* key, float fallback) const {
    KUIPER_ASSIGN_OR_RETURN(float v, number_or(key, fallback));
    if (!(std::isfinite(v) && v > 0.f)) {
      return error(std::string(key) + " is " + std::to_string(v) + " (it must be a finite number > 0)");
    }
    return v;
  }
  StatusOr<bool> boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) return error(std::string(key) + " is not true or false");
    return at(key).get<bool>();
  }
  StatusOr<std::string> string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_string()) return error(std::string(key) + " is not a string");
    return at(key).get<std::string>();
  }
  // An id or a list of ids (eos_token_id may be either); null gives an empty list.
  StatusOr<std::vector<int32_t>> ids_or(const char* key, std::vector<int32_t> fallback) const {
    if (!object_.contains(key)) return fallback;
    const json& value = at(key);
    if (value.is_null()) return std::vector<int32_t>{};
    if (!value.is_array()) {
      KUIPER_ASSIGN_OR_RETURN(int id, as_int(value, key));
      return std::vector<int32_t>{id};
    }
    std::vector<int32_t> ids;
    for (const json& v : value) {
      KUIPER_ASSIGN_OR_RETURN(int id, as_int(v, key));
      ids.push_back(id);
    }
    return ids;
  }

  Status error(const std::string& what) const { return invalid_format(source_ + ": " + what); }

 private:
  StatusOr<int> as_int(const json& value, const char* key) const {
    if (!value.is_number_integer() || value.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        value.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return error(std::string(key) + " is not a 32-bit integer (" + value.dump() + ")");
    }
    return static_cast<int>(value.get<int64_t>());
  }

  const json& object_;
  const std::string& source_;
};

// The transformers architectures kuiper runs: each a LLaMA with some switches (llama_config.h).
struct Family {
  const char* architecture;
  const char* model_type;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
};

StatusOr<Family> check_architecture(const Fields& root, const std::string& source) {
  KUIPER_ASSIGN_OR_RETURN(std::string model_type, root.string_or("model_type", ""));
  const Family* found = nullptr;
  if (root.has("architectures")) {
    const json& list = root.at("architectures");
    for (const Family& f : kFamilies) {
      if (list.is_array() && std::find(list.begin(), list.end(), json(f.architecture)) != list.end()) found = &f;
    }
    if (found == nullptr) {
      return unsupported(source + ": architectures " + list.dump() +
                         " is not one kuiper runs (LlamaForCausalLM, MistralForCausalLM, "
                         "Qwen2ForCausalLM, Qwen3ForCausalLM)");
    }
  } else {
    for (const Family& f : kFamilies) {
      if (model_type == f.model_type) found = &f;
    }
    if (found == nullptr) {
      return invalid_format(source + ": neither model_type nor architectures names a model kuiper runs");
    }
  }
  if (!model_type.empty() && model_type != found->model_type) {
    return unsupported(source + ": model_type '" + model_type + "' does not match " + found->architecture);
  }
  KUIPER_ASSIGN_OR_RETURN(std::string activation, root.string_or("hidden_act", "silu"));
  if (activation != "silu") return unsupported(source + ": hidden_act '" + activation + "' is not supported (silu only)");
  return *found;
}

// What the family adds to LLaMA, as transformers' modeling code for it does.
Status read_family_switches(const Fields& root, const Family& family, const std::string& source, LlamaConfig& c) {
  const std::string arch = family.architecture;
  KUIPER_ASSIGN_OR_RETURN(bool attention_bias, root.boolean_or("attention_bias", false));
  if (arch == "LlamaForCausalLM") {
    c.qkv_bias = c.output_bias = attention_bias;
    KUIPER_ASSIGN_OR_RETURN(c.mlp_bias, root.boolean_or("mlp_bias", false));
  } else if (arch == "Qwen2ForCausalLM") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
  } else if (arch == "Qwen3ForCausalLM") {
    c.qkv_bias = attention_bias;
    c.qk_norm = true;
  }
  if (arch == "MistralForCausalLM") {
    KUIPER_ASSIGN_OR_RETURN(c.sliding_window, root.integer_or("sliding_window", 0));
  } else if (arch != "LlamaForCausalLM") {
    KUIPER_ASSIGN_OR_RETURN(bool windowed, root.boolean_or("use_sliding_window", false));
    if (windowed) return unsupported(source + ": use_sliding_window (Qwen's windowed layers) is not supported");
  }
  return ok_status();
}

// RoPE θ and scaling. transformers 5 writes everything into "rope_parameters"; transformers 4
// wrote "rope_theta" at the top level and the scaling (or null) into "rope_scaling".
Status read_rope(const json& root_json, const Fields& root, const std::string& source, LlamaConfig& c) {
  const char* rope_key = root.has("rope_parameters") ? "rope_parameters"
                         : root.has("rope_scaling")  ? "rope_scaling" : nullptr;
  static const json kNoRope = json::object();
  const json& rope_json = rope_key ? root_json.at(rope_key) : kNoRope;
  if (!rope_json.is_object()) return root.error(std::string(rope_key) + " is not an object");
  const Fields rope(rope_json, source);

  KUIPER_ASSIGN_OR_RETURN(float top_theta, root.positive_number_or("rope_theta", 10000.f));
  KUIPER_ASSIGN_OR_RETURN(c.rope_theta, rope.positive_number_or("rope_theta", top_theta));
  for (const Fields* where : {&root, &rope}) {
    KUIPER_ASSIGN_OR_RETURN(float partial, where->number_or("partial_rotary_factor", 1.f));
    if (partial != 1.f) return unsupported(source + ": partial_rotary_factor " + std::to_string(partial) + " is not supported");
  }

  KUIPER_ASSIGN_OR_RETURN(std::string old_type, rope.string_or("type", "default"));
  KUIPER_ASSIGN_OR_RETURN(std::string type, rope.string_or("rope_type", old_type));
  if (type == "default") return ok_status();
  if (type != "llama3") {
    return unsupported(source + ": rope type '" + type + "' is not supported (default and llama3 are)");
  }
  // Same parameters and defaults as transformers' _compute_llama3_parameters.
  RopeScaling& s = c.rope_scaling;
  s.enabled = true;
  KUIPER_ASSIGN_OR_RETURN(s.factor, rope.number("factor"));
  KUIPER_ASSIGN_OR_RETURN(s.low_freq_factor, rope.number("low_freq_factor"));
  KUIPER_ASSIGN_OR_RETURN(s.high_freq_factor, rope.number("high_freq_factor"));
  KUIPER_ASSIGN_OR_RETURN(s.original_max_positions,
                          rope.integer_or("original_max_position_embeddings", c.max_seq_len));
  return ok_status();
}

Status read_dimensions(const Fields& root, LlamaConfig& c) {
  KUIPER_ASSIGN_OR_RETURN(c.dim, root.integer("hidden_size"));
  KUIPER_ASSIGN_OR_RETURN(c.hidden_dim, root.integer("intermediate_size"));
  KUIPER_ASSIGN_OR_RETURN(c.n_layers, root.integer("num_hidden_layers"));
  KUIPER_ASSIGN_OR_RETURN(c.n_heads, root.integer("num_attention_heads"));
  // transformers' defaults where a field may be left out.
  KUIPER_ASSIGN_OR_RETURN(c.n_kv_heads, root.integer_or("num_key_value_heads", c.n_heads));
  KUIPER_ASSIGN_OR_RETURN(c.vocab_size, root.integer("vocab_size"));
  KUIPER_ASSIGN_OR_RETURN(c.max_seq_len, root.integer_or("max_position_embeddings", 2048));
  KUIPER_ASSIGN_OR_RETURN(c.norm_eps, root.positive_number_or("rms_norm_eps", 1e-6f));
  KUIPER_ASSIGN_OR_RETURN(c.shared_classifier, root.boolean_or("tie_word_embeddings", false));
  if (root.has("head_dim") && c.n_heads > 0) {
    KUIPER_ASSIGN_OR_RETURN(int head_dim, root.integer("head_dim"));
    // Only a width that differs from hidden_size / heads is recorded (Qwen3, some Mistrals).
    if (static_cast<int64_t>(head_dim) * c.n_heads != c.dim) c.head_size = head_dim;
  }
  return ok_status();
}

}  // namespace

StatusOr<LlamaConfig> parse_hf_llama_config(const std::string& json_text, const std::string& source) {
  json root_json;
  try {
    root_json = json::parse(json_text);
  } catch (const json::exception& e) {
    return invalid_format(source + ": not valid JSON: " + e.what());
  }
  if (!root_json.is_object()) return invalid_format(source + ": not a JSON object");
  const Fields root(root_json, source);
  KUIPER_ASSIGN_OR_RETURN(Family family, check_architecture(root, source));

  LlamaConfig c;
  KUIPER_RETURN_IF_ERROR(read_dimensions(root, c));
  KUIPER_RETURN_IF_ERROR(read_family_switches(root, family, source, c));
  KUIPER_RETURN_IF_ERROR(read_rope(root_json, root, source, c));
  KUIPER_ASSIGN_OR_RETURN(std::vector<int32_t> bos, root.ids_or("bos_token_id", {1}));
  c.bos_id = bos.empty() ? -1 : bos.front();
  KUIPER_ASSIGN_OR_RETURN(c.eos_ids, root.ids_or("eos_token_id", {2}));

  Status valid = c.validate();
  if (!valid.ok()) return Status(valid.code(), source + ": " + valid.message());
  return c;
}

StatusOr<LlamaConfig> load_hf_llama_config(const std::string& path) {
  KUIPER_ASSIGN_OR_RETURN(const std::string text, read_regular_file(path));
  return parse_hf_llama_config(text, path);
}

}  // namespace kuiper
