// GGUF's quantized block types as kuiper weights. Most map onto a kuiper type that represents
// every weight exactly (the dequantized values equal ggml's, bit for bit):
//
//   Q8_0 (32 weights: fp16 d, int8 q; d·q)               int8, groups of 32, scale d
//   Q5_0 (32: fp16 d, 5-bit q; d·(q − 16))                int8, groups of 32, code q − 16
//   IQ4_NL (32: fp16 d, 4-bit q; d·kvalues[q])            int8, groups of 32, code kvalues[q]
//   Q4_0 (32: fp16 d, 4-bit q; d·(q − 8))                 int4 symmetric, groups of 32, scale d
//   Q4_1 (32: fp16 d, fp16 m, 4-bit q; d·q + m)           int4 with min, groups of 32, scale d, min m
//   Q2_K (256 in 16 sub-blocks of 16: 4-bit sc, m, 2-bit q, fp16 d, dmin; d·sc·q − dmin·m)
//                                                         int4 with min, groups of 16
//   Q3_K (256 in 16 of 16: 6-bit sc, 3-bit q in [−4, 3], fp16 d; d·(sc − 32)·q)
//                                                         int8, groups of 16
//   Q4_K (256 in 8 of 32: fp16 d, dmin, 6-bit sc, m, 4-bit q; d·sc·q − dmin·m)
//                                                         int4 with min, groups of 32
//   Q6_K (256 in 16 of 16: int8 sc, 6-bit q, fp16 d; d·sc·(q − 32))
//                                                         int8, groups of 16
//   IQ4_XS (256 in 8 of 32: fp16 d, 6-bit ls, 4-bit q; d·(ls − 32)·kvalues[q])
//                                                         int8, groups of 32
//
// The K-quant products are exact in fp32 (an fp16 times an integer of at most 8 bits), and so
// is d·sc·q for Q4_K (at most 21 significant bits), so one rounding remains where ggml has one.
//
// Q5_1 (d·q + m, q in [0, 31]) and Q5_K (d·sc·q − dmin·m) have a minimum and 5-bit codes, which
// neither int4 (4 bits) nor int8 (no minimum) holds: they are dequantized as ggml does and
// requantized to symmetric int8 groups of 32 (op/int8_weight.h: within half an int8 step of each
// group, max|w| / 254), and the loader says so.
#pragma once

#include <cstdint>
#include <string>

#include "kuiper/op/weight.h"

namespace kuiper {

// Whether decode_gguf_blocks reads ggml type id `type`.
bool gguf_blocks_readable(uint32_t type);

// Whether ggml type `type` becomes a kuiper weight only by requantization (Q5_1, Q5_K).
bool gguf_blocks_requantized(uint32_t type);

// The largest |added error| of a requantized matrix, and its largest |weight|.
struct RequantizationError {
  double max_error = 0;
  double max_weight = 0;
};

// The [rows, cols] matrix stored as ggml blocks of `type` at `data` (rows · cols / block weights
// whole blocks, already bounded against the file) as a host weight. A block whose fp16 scale
// (or minimum) is NaN or infinite is refused, naming `what` and the block. For a requantized
// type, `error` (when given) receives the error requantization added.
StatusOr<op::Weight> decode_gguf_blocks(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols,
                                        const std::string& what, RequantizationError* error = nullptr);

}  // namespace kuiper
