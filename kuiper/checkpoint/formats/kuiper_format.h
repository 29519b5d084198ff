// kuiper's own checkpoint format: a safetensors file with kuiper metadata (kuiper_metadata.h),
// holding fp32/fp16/bf16, int8 or (format version 2) int4 matrices. Tensors are used in place from the mapped file.
#pragma once

#include <string>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {


// Writes `checkpoint` whose matrices all share one storage (one float dtype, or int8/int4 in one
// group size and scheme; see convert_checkpoint) through `<path>.partial`, renamed when complete.
Status save_kuiper(const Checkpoint& checkpoint, const std::string& path);

}  // namespace kuiper
