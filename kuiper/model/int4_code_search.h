// Choosing an int4 group's scale (and minimum) to minimize the squared error of its weights,
// without giving up the plain scheme's guarantee that every weight comes back within half of
// the plain step (max − min)/15, or max|w|/7 when symmetric.
//
// Round-to-nearest on the plain code spends its 16 levels on the extremes; a slightly smaller
// step placed well serves the bulk of the group better. Only steps from 14/15 of the plain one
// up to it (symmetric: from 13/14) can keep the extremes within the bound, and for each the
// minimum must lie in an interval; a grid over both, then a least-squares refit of the best
// candidate's nibbles (kept only where it still meets the bound), finds the code. The plain code
// is one of the candidates, so the squared error never exceeds round-to-nearest's. The same idea
// as llama.cpp's make_qkx2_quants search, there without the bound.
#pragma once

namespace kuiper {

struct Int4GroupCode {
  float scale = 0.f;
  float min = 0.f;  // 0 for the symmetric scheme
};

// The code of the n weights at w, with a minimum (w ≈ scale · q + min, q in 0..15) or symmetric
// (w ≈ scale · (q − 8), q − 8 in −7..7).
Int4GroupCode search_int4_code(const float* w, int n, bool with_min);

// The plain codes: scale (max − min)/15 and min, or max|w|/7.
Int4GroupCode plain_int4_code(const float* w, int n, bool with_min);

// The nibble of weight v under `code` (round to nearest, clamped to the scheme's range).
unsigned int4_nibble_of(float v, const Int4GroupCode& code, bool with_min);

}  // namespace kuiper
