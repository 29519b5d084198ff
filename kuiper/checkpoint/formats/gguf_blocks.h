// GGUF's quantized block types as kuiper weights, each mapped onto a kuiper type that represents
// every weight exactly (the dequantized values equal ggml's, bit for bit):
//
//   Q8_0 (32 weights: fp16 d, int8 q; d·q)               int8, groups of 32, scale d
//   Q4_0 (32 weights: fp16 d, 4-bit q; d·(q − 8))         int4 symmetric, groups of 32, scale d
//   Q4_1 (32 weights: fp16 d, fp16 m, 4-bit q; d·q + m)   int4 with min, groups of 32, scale d, min m
//   Q4_K (256 weights in 8 sub-blocks of 32: fp16 d, dmin, 6-bit sc[j], m[j], 4-bit q;
//         d·sc·q − dmin·m)                                int4 with min, groups of 32,
//                                                         scale d·sc, min −dmin·m
//   Q6_K (256 weights in 16 sub-blocks of 16: int8 sc[j], 6-bit q, fp16 d; d·sc·(q − 32))
//                                                         int8, groups of 16, scale d·sc
//
// The K-quant products are exact in fp32 (an fp16 times an integer of at most 8 bits), and so
// is d·sc·q for Q4_K (at most 21 significant bits), so one rounding remains where ggml has one.
// Nibbles are repacked from ggml's order (a block's first half in the low nibbles of its bytes)
// into kuiper's (flat weight 2i low, 2i + 1 high; op/int4_weight.h).
#pragma once

#include <cstdint>
#include <string>

#include "kuiper/op/weight.h"

namespace kuiper {

// Whether decode_gguf_blocks reads ggml type id `type`.
bool gguf_blocks_readable(uint32_t type);

// The [rows, cols] matrix stored as ggml blocks of `type` at `data` (rows · cols / block weights
// whole blocks, already bounded against the file) as a host weight. A block whose fp16 scale
// (or minimum) is NaN or infinite is refused, naming `what` and the block.
StatusOr<op::Weight> decode_gguf_blocks(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols,
                                        const std::string& what);

}  // namespace kuiper
