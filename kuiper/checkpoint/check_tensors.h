// NaN and ±Inf in a checkpoint's weights, found at load and named (file, tensor, element, value)
// instead of turning every logit into NaN, or into garbage where an int8/int4 matmul converts a
// NaN activation to an integer (undefined behaviour).
//
// Two depths. The small tensors (every norm, bias and per-head norm, and every quantized
// matrix's scales and minimums) are always checked by load_checkpoint: they are a small part of
// the file, and a non-finite value there is swallowed by the int8/int4 paths. --check-tensors
// (as llama.cpp has) also scans the matrices' values, which reads every byte of the file where
// loading alone maps it; matrices converted at load (quantized, dequantized, GGUF blocks) are
// checked by their conversion.
#pragma once

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// OK when every norm, bias, scale and minimum is finite; otherwise an error naming the file,
// the first bad tensor (checkpoint_tensors.h names), the element and its value.
Status check_small_tensors_finite(const Checkpoint& checkpoint);

// As check_small_tensors_finite, and every float matrix's values too (int8/int4 values are
// finite by construction).
Status check_tensors_finite(const Checkpoint& checkpoint);

}  // namespace kuiper
