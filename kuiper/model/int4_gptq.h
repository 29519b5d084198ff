// Calibration-based int4 quantization: GPTQ (Frantar et al. 2022, "Accurate Post-Training
// Quantization for Generative Pre-trained Transformers") over kuiper's int4 groups.
//
// Rounding each weight on its own minimizes the weight error; what matters is the output error
// ‖X Wᵀ − X Ŵᵀ‖² over the inputs X the matrix sees, which depends on H = XᵀX (input_gram.h). GPTQ
// quantizes the columns in order and, after each, moves the not yet quantized columns of every
// row to cancel as much of that column's output error as H allows (the optimal brain surgeon
// update, through the upper Cholesky factor of H⁻¹). A group's code is searched
// (int4_code_search.h) when its first weight is reached, from the group's values updated so far.
// Groups run along the flat weight order (weight_groups.h), so one may span the end of a row and
// the start of the next; its code is then chosen at the next row's start, from values the
// earlier row's later columns still change, and its nibbles are clamped to the code's levels.
#pragma once

#include "kuiper/model/input_gram.h"
#include "kuiper/model/int4_quantize.h"

namespace kuiper {

// Dampening added to H's diagonal, as a fraction of its mean: keeps H⁻¹ well conditioned where the
// calibration inputs leave directions unexplored. The paper's 1% cost stories260K 0.1-0.2% of
// perplexity against 0.1% with the codes refit (docs/performance.md).
inline constexpr double kGptqDampening = 0.001;

// `values` [rows, cols] quantized like quantize_int4 does (same refusals), with `inputs` the Gram
// matrix of its calibration inputs (width cols, at least one row).
StatusOr<op::Weight> quantize_int4_gptq(const Tensor& values, const InputGram& inputs, int group_size,
                                        Int4Scheme scheme);

}  // namespace kuiper
