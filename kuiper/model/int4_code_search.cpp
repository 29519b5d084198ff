#include "kuiper/model/int4_code_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kuiper/op/int4_weight.h"

namespace kuiper {
namespace {

// Grid points over the admissible steps and, per step, over the admissible minimums. 8 × 8
// came within 0.1% of an unbounded fine search's squared error on Gaussian groups; 4 × 4 left 2%.
constexpr int kStepPoints = 8;
constexpr int kMinPoints = 8;

struct Fit {
  double squared_error;
  bool within;  // every weight within the bound
};

// The nibble of weight v under `code`, for a positive scale: round to nearest (rint rounds
// halves to even, as the int8 quantizer does), clamped to the scheme's range. Written with
// selects so that fit_of's loop vectorizes (this file is compiled with -fno-trapping-math,
// kuiper/CMakeLists.txt).
template <bool kWithMin>
int nibble_of(float v, const Int4GroupCode& code) {
  constexpr float kLow = kWithMin ? 0.f : -7.f, kHigh = kWithMin ? 15.f : 7.f;
  float r = std::rint((v - code.min) / code.scale);
  r = r < kLow ? kLow : r;
  r = r > kHigh ? kHigh : r;
  return static_cast<int>(r) + (kWithMin ? 0 : op::kInt4SymmetricZero);
}

// The search scores 81 codes a group, over hundreds of millions of groups when a model is
// quantized at load, so this loop is most of the load's time: it runs as SIMD, its sum taken in
// vector lanes rather than in one serial chain of double additions. A code without a positive
// scale (a degenerate refit) is no candidate.
template <bool kWithMin>
Fit fit_of(const float* w, int n, const Int4GroupCode& code, float bound) {
  if (!(code.scale > 0.f)) return {std::numeric_limits<double>::infinity(), false};
  double squared = 0.0, worst = 0.0;
#pragma omp simd reduction(+ : squared) reduction(max : worst)
  for (int i = 0; i < n; ++i) {
    const float back = op::int4_value(nibble_of<kWithMin>(w[i], code), code.scale, code.min, kWithMin);
    const double d = static_cast<double>(back) - w[i];
    squared += d * d;
    const double size = std::fabs(d);
    worst = worst > size ? worst : size;
  }
  return {squared, worst <= bound};
}

// The least-squares scale (and min) for the nibbles `code` gives the group.
Int4GroupCode refit(const float* w, int n, const Int4GroupCode& code, bool with_min) {
  double sq = 0, sqq = 0, sw = 0, sqw = 0;
  for (int i = 0; i < n; ++i) {
    const int nibble = static_cast<int>(int4_nibble_of(w[i], code, with_min));
    const double q = with_min ? nibble : nibble - op::kInt4SymmetricZero;
    sq += q;
    sqq += q * q;
    sw += w[i];
    sqw += q * w[i];
  }
  if (!with_min) return sqq > 0 ? Int4GroupCode{static_cast<float>(sqw / sqq), 0.f} : code;
  const double det = n * sqq - sq * sq;
  if (det <= 0) return code;
  return {static_cast<float>((n * sqw - sq * sw) / det), static_cast<float>((sqq * sw - sq * sqw) / det)};
}

}  // namespace

Int4GroupCode plain_int4_code(const float* w, int n, bool with_min) {
  if (with_min) {
    const auto [lo, hi] = std::minmax_element(w, w + n);
    return {(*hi - *lo) / 15.f, *lo};
  }
  float max_abs = 0.f;
  for (int i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(w[i]));
  return {max_abs / 7.f, 0.f};
}

unsigned int4_nibble_of(float v, const Int4GroupCode& code, bool with_min) {
  // A group of equal weights has scale 0 and comes back exactly (as 0, or as its min).
  if (!(code.scale > 0.f)) return with_min ? 0u : static_cast<unsigned>(op::kInt4SymmetricZero);
  return static_cast<unsigned>(with_min ? nibble_of<true>(v, code) : nibble_of<false>(v, code));
}

Int4GroupCode search_int4_code(const float* w, int n, bool with_min) {
  const Int4GroupCode plain = plain_int4_code(w, n, with_min);
  if (!(plain.scale > 0.f) || !std::isfinite(plain.scale)) return plain;
  const float step = plain.scale;
  // The plain code's own guarantee, with room for the fp32 rounding of its reconstruction.
  const float bound = step / 2 * (1 + 1e-6f);
  Int4GroupCode best = plain;
  const auto fit_of_code = [&](const Int4GroupCode& code) {
    return with_min ? fit_of<true>(w, n, code, bound) : fit_of<false>(w, n, code, bound);
  };
  Fit best_fit = fit_of_code(plain);
  const auto consider = [&](const Int4GroupCode& code) {
    const Fit fit = fit_of_code(code);
    if (fit.within && fit.squared_error < best_fit.squared_error) {
      best = code;
      best_fit = fit;
    }
  };
  // The extremes stay within half a plain step only if the levels span all but one plain step:
  // 15 s ≥ 14 · step with a minimum, 7 s ≥ 6.5 · step when symmetric.
  const float smallest = with_min ? step * 14.f / 15.f : step * 13.f / 14.f;
  const float lo = plain.min, hi = with_min ? plain.min + 15.f * step : 0.f;
  for (int i = 0; i <= kStepPoints; ++i) {
    const float s = smallest + (step - smallest) * static_cast<float>(i) / kStepPoints;
    if (!with_min) {
      consider({s, 0.f});
      continue;
    }
    // The lowest level within half a step of the smallest weight, the highest of the largest.
    const float min_low = hi - step / 2 - 15.f * s, min_high = lo + step / 2;
    for (int j = 0; j <= kMinPoints; ++j) {
      consider({s, min_low + (min_high - min_low) * static_cast<float>(j) / kMinPoints});
    }
  }
  consider(refit(w, n, best, with_min));
  return best;
}

}  // namespace kuiper
