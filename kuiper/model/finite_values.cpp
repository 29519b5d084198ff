#include "kuiper/model/finite_values.h"

#include <cmath>

namespace kuiper {

int64_t first_non_finite(const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return -1;
}

std::string non_finite_name(float value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "+Inf" : "-Inf";
}

}  // namespace kuiper
