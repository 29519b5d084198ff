// kuiper's own checkpoint format: a safetensors file with kuiper metadata (kuiper_metadata.h),
// holding fp32/fp16/bf16, int8 or (format version 2) int4 matrices, from version 3 not all alike
// (kuiper_matrix_storage.h). Tensors are used in place from the mapped file.
#pragma once

#include <string>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// Writes `checkpoint` through `<path>.partial`, renamed when complete. Matrices stored unlike the
// first layer's are listed in the metadata (format version 3, kuiper_matrix_storage.h).
Status save_kuiper(const Checkpoint& checkpoint, const std::string& path);

}  // namespace kuiper
