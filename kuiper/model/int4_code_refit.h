// After GPTQ (int4_gptq.h) has fixed every weight's nibble, the groups' scales (and minimums) can
// still move: for one row w of the original weights, the reconstruction is linear in its groups'
// codes, so the codes minimizing the output error (w − ŵ) H (w − ŵ)ᵀ solve a small least-squares
// problem (two unknowns a group, one when symmetric). GPTQ chose each code before the row's later
// errors were known; refitting them took stories260K's perplexity excess down by a further
// 0.3-0.5% (docs/performance.md). Groups spanning two rows keep their codes (moving one would
// couple the rows' problems), and a row keeps its old codes unless the refit lowers its error
// with positive scales.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kuiper/model/int4_code_search.h"

namespace kuiper {

// `original` and `quantized` hold rows × cols weights (row-major), `quantized` the values the
// nibbles were rounded from under `codes` (one a group of `group_size` consecutive weights); `h`
// is the cols × cols Gram matrix of the inputs (as dampened for GPTQ). Refits the codes of the
// groups lying within a row and rewrites those weights of `quantized` as the refit code's levels,
// so that rounding them under the new code gives back the same nibbles.
void refit_int4_codes(std::span<const float> original, std::span<float> quantized, std::vector<Int4GroupCode>& codes,
                      int64_t rows, int64_t cols, int group_size, bool with_min, std::span<const double> h);

}  // namespace kuiper
