#include "kuiper/checkpoint/formats/layer_tensors.h"

#include <charconv>
#include <optional>
#include <set>

namespace kuiper {
namespace {

// The layer of "<prefix><index>.<rest>", or nothing for other names.
std::optional<long> layer_of(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  long index = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), index);
  if (error != std::errc() || end == name.data() || end == name.data() + name.size() || *end != '.') {
    return std::nullopt;
  }
  return index;
}

}  // namespace

Status check_layer_tensors(const std::vector<std::string>& names, std::string_view prefix, int n_layers,
                           const std::string& key, const std::string& source) {
  std::set<long> layers;
  for (const std::string& name : names) {
    if (const std::optional<long> layer = layer_of(name, prefix)) layers.insert(*layer);
  }
  const std::string stated = source + ": " + key + " is " + std::to_string(n_layers);
  if (!layers.empty() && *layers.rbegin() >= n_layers) {
    return invalid_format(stated + " but the file has tensors of layer " + std::to_string(*layers.rbegin()) + " (" +
                          std::string(prefix) + std::to_string(*layers.rbegin()) + ".*)");
  }
  for (long l = 0; l < n_layers; ++l) {
    if (!layers.count(l)) {
      return invalid_format(stated + " but the file has no tensors of layer " + std::to_string(l) + " (" +
                            std::string(prefix) + std::to_string(l) + ".*)");
    }
  }
  return ok_status();
}

}  // namespace kuiper
