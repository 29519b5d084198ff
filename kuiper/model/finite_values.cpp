#include "kuiper/model/finite_values.h"

#include <cmath>

namespace kuiper {

int64_t first_not_below(const float* values, int64_t n, float limit) {
  // Every matrix is checked before it is quantized: on a 70B model a serial scan took minutes.
  int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first) if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::fabs(values[i]) < limit) && i < first) first = i;
  }
  return first < n ? first : -1;
}

std::string non_finite_name(float value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "+Inf" : "-Inf";
}

Status check_all_finite(const float* values, int64_t n, const std::string& what) {
  const int64_t bad = first_non_finite(values, n);
  if (bad < 0) return ok_status();
  return invalid_format(what + " holds " + non_finite_name(values[bad]) + " at element " + std::to_string(bad));
}

}  // namespace kuiper
