#include "kuiper/checkpoint/formats/kuiper_matrix_storage.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kuiper/checkpoint/checkpoint_tensors.h"

namespace kuiper {

using json = nlohmann::json;

void add_matrix_storage(Metadata& metadata, const std::map<std::string, WeightFormat>& storage) {
  if (storage.empty()) return;
  json out = json::object();
  for (const auto& [name, format] : storage) {
    const StorageFields f = storage_fields(format);
    out[name] = {{"weights", f.weights}, {"quantization", f.quantization}, {"group_size", f.group_size}};
  }
  metadata["format_version"] = std::to_string(kMatrixStorageVersion);
  metadata[kMatrixStorageKey] = out.dump();
}

StatusOr<std::map<std::string, WeightFormat>> matrix_storage(const Metadata& metadata, const KuiperHeader& header,
                                                             const std::string& source) {
  std::map<std::string, WeightFormat> out;
  const auto it = metadata.find(kMatrixStorageKey);
  if (it == metadata.end()) return out;
  if (header.version < kMatrixStorageVersion) {
    return invalid_format(source + ": \"" + kMatrixStorageKey + "\" needs format version " +
                          std::to_string(kMatrixStorageVersion) + ", the file is version " + std::to_string(header.version));
  }
  const json j = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_format(source + ": \"" + kMatrixStorageKey + "\" is not a JSON object");
  }
  const std::vector<MatrixSpec> specs = matrix_specs(header.config);
  for (const auto& item : j.items()) {
    // Named, not a structured binding: lambdas below use them (clang 14 cannot capture bindings).
    const std::string& name = item.key();
    const json& entry = item.value();
    const bool is_matrix = std::any_of(specs.begin(), specs.end(), [&](const MatrixSpec& s) { return s.name == name; });
    if (!is_matrix) return invalid_format(source + ": \"" + kMatrixStorageKey + "\" names " + name + ", no matrix of this model");
    const auto field = [&](const char* key) -> std::string {
      const auto it = entry.is_object() ? entry.find(key) : entry.end();
      return it != entry.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    KUIPER_ASSIGN_OR_RETURN(out[name], parse_weight_storage({field("weights"), field("quantization"), field("group_size")},
                                                            header.version, source + ": " + name));
  }
  return out;
}

}  // namespace kuiper
