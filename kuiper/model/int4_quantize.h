// Weight-only int4 quantization (layout: op/int4_weight.h), two schemes:
//   symmetric:  w ≈ scale · (q − 8), q − 8 in [−7, 7];
//   with a min: w ≈ scale · q + min, q in [0, 15].
// Each group's code is searched (int4_code_search.h) for the least squared error among those
// that keep every weight within half of the plain step — (max(w) − min(w)) / 15 with a minimum,
// max|w| / 7 symmetric — so the plain round-to-nearest bound holds and the error is never
// larger than round-to-nearest's. The minimum scheme's step is at most 14/15 of the symmetric
// one, at the price of 4 more bytes a group. Host-side; used by the export tool and at model load.
#pragma once

#include <span>

#include "kuiper/model/int4_code_search.h"
#include "kuiper/op/int4_weight.h"

namespace kuiper {

inline constexpr int kDefaultInt4GroupSize = 32;

enum class Int4Scheme { kSymmetric, kWithMin };

// The minimum scheme is the default: on stories260K (groups of 32) its perplexity rose 10.7% over
// fp32 against the symmetric scheme's 20.4%, for 6 bits a weight instead of 5
// (docs/performance.md).
inline constexpr Int4Scheme kDefaultInt4Scheme = Int4Scheme::kWithMin;

// Quantizes a 2-d fp32/fp16/bf16 tensor with an even number of columns; refuses when its element
// count is not a multiple of `group_size` (which must be even) or a weight is not finite.
StatusOr<op::Weight> quantize_int4(const Tensor& values, int group_size, Int4Scheme scheme);

// The host fp32 copy of `values` that quantize_int4 reads, with its refusals (also used by the
// calibration-based quantizer, int4_gptq.h).
StatusOr<Tensor> int4_quantization_source(const Tensor& values, int group_size);

// The int4 weight of host fp32 `values` [rows, cols] whose group g has code codes[g]: each
// weight's nibble is its nearest level under that code.
StatusOr<op::Weight> int4_weight_from_codes(const Tensor& values, std::span<const Int4GroupCode> codes,
                                            int group_size, Int4Scheme scheme);

// The fp32 values an int4 weight stands for (host tensor [rows, cols]).
StatusOr<Tensor> dequantize_int4(const op::Weight& weight);

}  // namespace kuiper
