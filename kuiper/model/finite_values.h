// NaN and ±Inf in weights: they turn every logit into NaN, and converting them to an integer
// (int8 quantization) is undefined behaviour, so they are found before either can happen.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kuiper/base/status.h"

namespace kuiper {

// Index of the first of `n` floats whose magnitude is not below `limit` (a NaN included), or -1.
int64_t first_not_below(const float* values, int64_t n, float limit);

// Index of the first NaN or ±Inf among `n` floats, or -1 when all are finite.
inline int64_t first_non_finite(const float* values, int64_t n) {
  return first_not_below(values, n, std::numeric_limits<float>::infinity());
}

// "NaN", "+Inf" or "-Inf", for messages.
std::string non_finite_name(float value);

// OK when all `n` floats are finite; otherwise invalid_format "<what> holds NaN at element 5".
Status check_all_finite(const float* values, int64_t n, const std::string& what);

}  // namespace kuiper
