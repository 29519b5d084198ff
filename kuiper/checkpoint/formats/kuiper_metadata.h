// The metadata that makes a safetensors file a kuiper checkpoint, shared by its reader and
// writer. Keys of the safetensors "__metadata__" map (all values are strings there):
//   "format": "kuiper", "format_version": "1", or "2" for int4 weights (so that a build that
//             reads only version 1 refuses an int4 file instead of misreading it)
//   "config": JSON of every LlamaConfig field (dims, rope_theta, rope_scaling, norm_eps,
//             shared_classifier, bos_id, eos_ids)
//   "weights": "fp32" | "fp16" | "bf16" | "int8" | "int4" — how every matrix is stored
//   "quantization": "none" | "int8-symmetric-grouped" (scale = max|w|/127 per group) |
//                   "int4-symmetric-grouped" (scale = max|w|/7) | "int4-min-grouped" (scale and
//                   min per group; both op/int4_weight.h)
//   "group_size": int8/int4 group size, "0" otherwise
//   "matrix_storage" (version 3): the matrices stored unlike "weights" says
//             (kuiper_matrix_storage.h), e.g. the int8 token embedding of an int4 file
// Tensors: "<matrix>.weight" (int4: U8 [rows, cols / 2], two weights a byte) + "<matrix>.scales"
// (F32, quantized only) + "<matrix>.mins" (F32, int4-min-grouped only) for the names of
// checkpoint_tensors.h, "<norm>.weight" (fp32) for the norms.
#pragma once

#include <map>
#include <string>

#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/model/llama_config.h"

namespace kuiper {

inline constexpr const char* kKuiperFormatName = "kuiper";
// The newest version this build reads and writes; it also reads every earlier one.
inline constexpr int kKuiperFormatVersion = 3;

// The version a file of matrices stored as `weights` is written in: the oldest that holds them.
int kuiper_format_version(const WeightFormat& weights);

// How a storage is spelled in the metadata: "weights", "quantization" and "group_size".
struct StorageFields {
  std::string weights, quantization, group_size;
};
StorageFields storage_fields(const WeightFormat& weights);
// The storage `fields` spell, refused when unknown, inconsistent or newer than `version`.
StatusOr<WeightFormat> parse_weight_storage(const StorageFields& fields, int version, const std::string& source);

using Metadata = std::map<std::string, std::string>;

// Metadata for a checkpoint of `config` whose matrices are stored as `weights` (those stored
// otherwise: kuiper_matrix_storage.h).
Metadata kuiper_metadata(const LlamaConfig& config, const WeightFormat& weights);

// The config and weight format recorded in `metadata`; `source` names the file in errors.
struct KuiperHeader {
  int version = 0;
  LlamaConfig config;
  WeightFormat weights;
};
StatusOr<KuiperHeader> parse_kuiper_metadata(const Metadata& metadata, const std::string& source);

// True when a safetensors header (the JSON text) declares the kuiper format.
bool declares_kuiper_format(const char* json_text, size_t length);

}  // namespace kuiper
