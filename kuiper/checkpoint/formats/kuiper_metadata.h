// The metadata that makes a safetensors file a kuiper checkpoint, shared by its reader and
// writer. Keys of the safetensors "__metadata__" map (all values are strings there):
//   "format": "kuiper", "format_version": "1"
//   "config": JSON of every LlamaConfig field (dims, rope_theta, rope_scaling, norm_eps,
//             shared_classifier, bos_id, eos_ids)
//   "weights": "fp32" | "fp16" | "bf16" | "int8" — how every matrix is stored
//   "quantization": "none" | "int8-symmetric-grouped" (scale = max|w|/127 per group)
//   "group_size": int8 group size, "0" otherwise
// Tensors: "<matrix>.weight" (+ "<matrix>.scales" for int8) for the names of
// checkpoint_tensors.h, "<norm>.weight" (fp32) for the norms.
#pragma once

#include <map>
#include <string>

#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/model/llama_config.h"

namespace kuiper {

inline constexpr const char* kKuiperFormatName = "kuiper";
inline constexpr int kKuiperFormatVersion = 1;

using Metadata = std::map<std::string, std::string>;

// Metadata for a checkpoint of `config` whose matrices are stored as `weights`.
Metadata kuiper_metadata(const LlamaConfig& config, const WeightFormat& weights);

// The config and weight format recorded in `metadata`; `source` names the file in errors.
struct KuiperHeader {
  LlamaConfig config;
  WeightFormat weights;
};
StatusOr<KuiperHeader> parse_kuiper_metadata(const Metadata& metadata, const std::string& source);

// True when a safetensors header (the JSON text) declares the kuiper format.
bool declares_kuiper_format(const char* json_text, size_t length);

}  // namespace kuiper
