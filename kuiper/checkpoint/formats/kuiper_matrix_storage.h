// Format version 3 of kuiper files (kuiper_metadata.h): matrices stored unlike the file's
// "weights", such as the int8 token embedding and classifier of an int4 file. The metadata key
// "matrix_storage" holds a JSON object from matrix name (checkpoint_tensors.h) to that matrix's
// storage, spelled like the file's own:
//   {"token_embedding": {"weights": "int8", "quantization": "int8-symmetric-grouped", "group_size": "64"}}
// Files that store every matrix alike stay version 1 or 2, so older builds still read them.
#pragma once

#include <map>
#include <string>

#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/model/llama_config.h"

namespace kuiper {

inline constexpr const char* kMatrixStorageKey = "matrix_storage";
inline constexpr int kMatrixStorageVersion = 3;

std::string matrix_storage_json(const std::map<std::string, WeightFormat>& storage);

// The storage of each matrix `text` names; refuses text that is not such an object, a name that
// is no matrix of a model of `config`, and a storage parse_weight_storage refuses.
StatusOr<std::map<std::string, WeightFormat>> parse_matrix_storage(const std::string& text, const LlamaConfig& config,
                                                                   int version, const std::string& source);

}  // namespace kuiper
