// --check-tensors (as llama.cpp has): every weight of a loaded checkpoint scanned for NaN and
// ±Inf, so that a damaged file is refused at load, naming the tensor, instead of producing NaN
// logits. Optional because it reads every byte of the file, which loading alone does not.
#pragma once

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// OK when every value is finite; otherwise an error naming the file, the first bad tensor
// (checkpoint_tensors.h names), the element and its value. int8 weights: their scales.
Status check_tensors_finite(const Checkpoint& checkpoint);

}  // namespace kuiper
