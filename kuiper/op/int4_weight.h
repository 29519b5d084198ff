// The int4 weight contract shared by quantizer, loaders and kernels. Weights are grouped as for
// every quantized type (weight_groups.h) and packed two a byte in row-major order: byte i holds
// flat weight 2i in its low nibble and weight 2i + 1 in its high nibble, so cols must be even
// (every row then starts on a byte). A nibble q in [0, 15] stands for
//   symmetric (mins empty):        scale · (q − 8)          (q − 8 in [−7, 7] from the quantizer)
//   with a per-group minimum:      scale · q + min          (like GGUF's Q4_1)
// One weight type carries both; kernels tell them apart by whether `mins` is empty.
#pragma once

#include <cstdint>

#include "kuiper/op/weight_groups.h"

// The helpers below run in host and CUDA device code alike.
#ifdef __CUDACC__
#define KUIPER_INT4_HOST_DEVICE __host__ __device__
#else
#define KUIPER_INT4_HOST_DEVICE
#endif

namespace kuiper::op {

// The nibble that stands for 0 in a symmetric int4 weight.
inline constexpr int kInt4SymmetricZero = 8;

// OK when `weight` is int4 values [rows, cols / 2] with scales (and, when present, mins)
// [rows * cols / group_size] on the same device in its group_constants_dtype, rows * cols
// divisible by group_size and the group size even; otherwise says which part does not fit.
Status check_int4_weight(const Weight& weight);

// Nibble `index` (flat weight index) of packed int4 bytes.
KUIPER_INT4_HOST_DEVICE inline int int4_nibble(const uint8_t* packed, int64_t index) {
  const uint8_t byte = packed[index / 2];
  return (index % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
}

// What nibble q of a group with `scale` and `min` stands for; `with_min` says which scheme.
KUIPER_INT4_HOST_DEVICE inline float int4_value(int q, float scale, float min, bool with_min) {
  return with_min ? scale * static_cast<float>(q) + min
                  : scale * static_cast<float>(q - kInt4SymmetricZero);
}

}  // namespace kuiper::op
