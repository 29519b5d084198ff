// Putting checkpoint weights into the form and place a model runs them in: the requested dtype
// on the requested device. fp32 weights that stay fp32 on the CPU are used in place (no copy).
#pragma once

#include <span>

#include "kuiper/base/allocator.h"
#include "kuiper/op/weight.h"

namespace kuiper {

// A weight in `dtype` on the allocator's device. Float dtypes convert with round-to-nearest;
// int8 quantizes in groups of kDefaultInt8GroupSize (int8_quantize.h), int4 in the default scheme
// and groups of kDefaultInt4GroupSize (int4_quantize.h), and both dequantize back.
StatusOr<op::Weight> convert_weight(const op::Weight& weight, DataType dtype, Allocator& allocator);

// `weight` (quantized or float) as a host weight quantized the way `like` is (int8 or int4, its
// group size and int4 scheme): itself when it already is, else quantized from its (dequantized)
// values. Parts of one stacked matrix must share their quantization.
StatusOr<op::Weight> quantize_like(const op::Weight& weight, const op::Weight& like);

// Whether two weights have the same dtype, group size and (int4) scheme.
bool same_quantization(const op::Weight& a, const op::Weight& b);

// One weight holding `parts` stacked row after row, in `dtype` on the allocator's device (the
// parts must agree in columns and, once in `dtype`, in quantization). Converted on the host,
// uploaded once.
StatusOr<op::Weight> stack_rows(std::span<const op::Weight> parts, DataType dtype, Allocator& allocator);


}  // namespace kuiper
