// Format version 3 of kuiper files (kuiper_metadata.h): matrices stored unlike the file's
// "weights", such as the int8 token embedding and classifier of an int4 file. The metadata key
// "matrix_storage" holds a JSON object from matrix name (checkpoint_tensors.h) to that matrix's
// storage, spelled like the file's own:
//   {"token_embedding": {"weights": "int8", "quantization": "int8-symmetric-grouped", "group_size": "64"}}
// Files that store every matrix alike stay version 1 or 2, so older builds still read them.
#pragma once

#include <map>
#include <string>

#include "kuiper/checkpoint/formats/kuiper_metadata.h"

namespace kuiper {

inline constexpr const char* kMatrixStorageKey = "matrix_storage";
inline constexpr int kMatrixStorageVersion = 3;

// Records `storage` (matrices stored unlike the file's "weights") in `metadata`, making the file
// version 3; nothing when it is empty.
void add_matrix_storage(Metadata& metadata, const std::map<std::string, WeightFormat>& storage);

// The storage of each matrix the metadata of the file `header` describes lists; refuses the key in
// a file older than version 3, text that is not a JSON object, a name that is no matrix of the
// model and a storage parse_weight_storage refuses.
StatusOr<std::map<std::string, WeightFormat>> matrix_storage(const Metadata& metadata, const KuiperHeader& header,
                                                             const std::string& source);

}  // namespace kuiper
