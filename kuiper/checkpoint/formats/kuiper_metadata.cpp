#include "kuiper/checkpoint/formats/kuiper_metadata.h"

#include <nlohmann/json.hpp>

namespace kuiper {
namespace {

using json = nlohmann::json;

json config_to_json(const LlamaConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  return {{"dim", c.dim}, {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
          {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size},
          {"max_seq_len", c.max_seq_len}, {"rope_theta", c.rope_theta},
          {"rope_scaling", {{"enabled", r.enabled}, {"factor", r.factor},
                            {"low_freq_factor", r.low_freq_factor},
                            {"high_freq_factor", r.high_freq_factor},
                            {"original_max_positions", r.original_max_positions}}},
          {"norm_eps", c.norm_eps}, {"shared_classifier", c.shared_classifier},
          {"bos_id", c.bos_id}, {"eos_ids", c.eos_ids}, {"head_size", c.head_size},
          {"qkv_bias", c.qkv_bias}, {"output_bias", c.output_bias}, {"mlp_bias", c.mlp_bias},
          {"qk_norm", c.qk_norm}, {"sliding_window", c.sliding_window}};
}

// Reads every field; json::at/get throw on a missing key or wrong type, which the caller turns
// into a Status.
LlamaConfig config_from_json(const json& j) {
  LlamaConfig c;
  c.dim = j.at("dim").get<int>();
  c.hidden_dim = j.at("hidden_dim").get<int>();
  c.n_layers = j.at("n_layers").get<int>();
  c.n_heads = j.at("n_heads").get<int>();
  c.n_kv_heads = j.at("n_kv_heads").get<int>();
  c.vocab_size = j.at("vocab_size").get<int>();
  c.max_seq_len = j.at("max_seq_len").get<int>();
  c.rope_theta = j.at("rope_theta").get<float>();
  const json& r = j.at("rope_scaling");
  c.rope_scaling.enabled = r.at("enabled").get<bool>();
  c.rope_scaling.factor = r.at("factor").get<float>();
  c.rope_scaling.low_freq_factor = r.at("low_freq_factor").get<float>();
  c.rope_scaling.high_freq_factor = r.at("high_freq_factor").get<float>();
  c.rope_scaling.original_max_positions = r.at("original_max_positions").get<int>();
  c.norm_eps = j.at("norm_eps").get<float>();
  c.shared_classifier = j.at("shared_classifier").get<bool>();
  c.bos_id = j.at("bos_id").get<int32_t>();
  c.eos_ids = j.at("eos_ids").get<std::vector<int32_t>>();
  // The family switches; files written before them are LLaMA models without any.
  c.head_size = j.value("head_size", 0);
  c.qkv_bias = j.value("qkv_bias", false);
  c.output_bias = j.value("output_bias", false);
  c.mlp_bias = j.value("mlp_bias", false);
  c.qk_norm = j.value("qk_norm", false);
  c.sliding_window = j.value("sliding_window", 0);
  return c;
}

StatusOr<std::string> required(const Metadata& m, const std::string& key, const std::string& source) {
  auto it = m.find(key);
  if (it == m.end()) return invalid_format(source + ": kuiper metadata lacks \"" + key + "\"");
  return it->second;
}

bool is_quantized(DataType d) { return d == DataType::kINT8 || d == DataType::kINT4; }

std::string quantization_name(const WeightFormat& weights) {
  switch (weights.dtype) {
    case DataType::kINT8: return "int8-symmetric-grouped";
    case DataType::kINT4:
      return weights.int4_scheme == Int4Scheme::kWithMin ? "int4-min-grouped" : "int4-symmetric-grouped";
    default: return "none";
  }
}

}  // namespace

int kuiper_format_version(const WeightFormat& weights) { return weights.dtype == DataType::kINT4 ? 2 : 1; }

StorageFields storage_fields(const WeightFormat& weights) {
  return {std::string(dtype_name(weights.dtype)), quantization_name(weights),
          std::to_string(is_quantized(weights.dtype) ? weights.group_size : 0)};
}

StatusOr<WeightFormat> parse_weight_storage(const StorageFields& fields, int version, const std::string& source) {
  WeightFormat f;
  try {
    f.group_size = std::stoi(fields.group_size);
  } catch (const std::exception&) {
    return invalid_format(source + ": bad group size \"" + fields.group_size + "\"");
  }
  bool known = false;
  for (DataType d : {DataType::kFP32, DataType::kFP16, DataType::kBF16, DataType::kINT8, DataType::kINT4}) {
    if (fields.weights == dtype_name(d)) {
      f.dtype = d;
      known = true;
    }
  }
  f.int4_scheme = fields.quantization == "int4-min-grouped" ? Int4Scheme::kWithMin : Int4Scheme::kSymmetric;
  const bool quantized = is_quantized(f.dtype);
  if (!known || fields.quantization != quantization_name(f) || (quantized && f.group_size <= 0) ||
      version < kuiper_format_version(f) || (f.dtype == DataType::kINT4 && f.group_size % 2 != 0)) {
    return invalid_format(source + ": unsupported weight storage \"" + fields.weights + "\" / quantization \"" +
                          fields.quantization + "\" / group size " + fields.group_size + " in format version " +
                          std::to_string(version));
  }
  return f;
}

Metadata kuiper_metadata(const LlamaConfig& config, const WeightFormat& weights) {
  const StorageFields fields = storage_fields(weights);
  return {{"format", kKuiperFormatName},
          {"format_version", std::to_string(kuiper_format_version(weights))},
          {"config", config_to_json(config).dump()},
          {"weights", fields.weights},
          {"quantization", fields.quantization},
          {"group_size", fields.group_size}};
}

StatusOr<KuiperHeader> parse_kuiper_metadata(const Metadata& m, const std::string& source) {
  KUIPER_ASSIGN_OR_RETURN(std::string format, required(m, "format", source));
  KUIPER_ASSIGN_OR_RETURN(std::string version, required(m, "format_version", source));
  if (format != kKuiperFormatName) return invalid_format(source + ": format is \"" + format + "\", not kuiper");
  KuiperHeader h;
  for (int known = 1; known <= kKuiperFormatVersion; ++known) {
    if (version == std::to_string(known)) h.version = known;
  }
  if (h.version == 0) {
    return unsupported(source + ": kuiper format version " + version + "; this build reads versions 1 to " +
                       std::to_string(kKuiperFormatVersion));
  }
  KUIPER_ASSIGN_OR_RETURN(std::string config_text, required(m, "config", source));
  KUIPER_ASSIGN_OR_RETURN(std::string weights, required(m, "weights", source));
  KUIPER_ASSIGN_OR_RETURN(std::string quantization, required(m, "quantization", source));
  KUIPER_ASSIGN_OR_RETURN(std::string group_size, required(m, "group_size", source));

  const json j = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  try {
    if (j.is_discarded()) throw std::invalid_argument("not JSON");
    h.config = config_from_json(j);
  } catch (const std::exception& e) {
    return invalid_format(source + ": bad kuiper config metadata: " + e.what());
  }
  Status valid = h.config.validate();
  if (!valid.ok()) return Status(valid.code(), source + ": " + valid.message());
  KUIPER_ASSIGN_OR_RETURN(h.weights, parse_weight_storage({weights, quantization, group_size}, h.version, source));
  return h;
}

bool declares_kuiper_format(const char* json_text, size_t length) {
  const json j = json::parse(json_text, json_text + length, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto meta = j.find("__metadata__");
  if (meta == j.end() || !meta->is_object()) return false;
  auto format = meta->find("format");
  return format != meta->end() && format->is_string() && format->get<std::string>() == kKuiperFormatName;
}

}  // namespace kuiper
