// Shape checks shared by every backend's kernels: whether the tensors handed to a kernel fit
// each other, independent of device and dtype (each backend checks those itself).
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op {

// q [T, n*head_dim], k [T, m*head_dim], positions [T], cos/sin [positions, head_dim/2].
Status check_rope_shapes(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos,
                         const Tensor& sin, int head_dim);

// q and out [T, n_heads*head_dim], caches [context, n_kv_heads*head_dim], positions [T].
Status check_attention_shapes(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const Tensor& positions, const AttentionShape& shape, const Tensor& out);

// block_tables int32 [sequences, width], row_sequence int32 [T] beside positions [T], a
// positive block size, and a pool of whole blocks (cache_rows a multiple of the block size).
Status check_paged_shapes(const PagedKv& paged, const Tensor& positions, int64_t cache_rows);

// Split-cache decode attention (flash-decoding) cuts the cache into ranges of at least this many
// rows and merges the ranges' partial results, which live in the execution context's
// ScratchUse::kAttentionPartials region.
inline constexpr int kDecodeSplitMinRows = 64;
// The most that region needs for one decode row over a cache of `context` rows: per head and
// range, head_dim partial outputs plus the range's maximum and sum, in fp32.
size_t decode_attention_partials_bytes(int64_t context, const AttentionShape& shape);

}  // namespace kuiper::op
