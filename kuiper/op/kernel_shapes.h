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

// Split-cache decode attention (flash-decoding) of one sequence cuts the cache into ranges of at
// least this many rows (as paged attention: kPagedSplitMinRows) and merges the ranges' partial
// results, which live in the execution context's ScratchUse::kAttentionPartials region. Longer
// ranges give each warp more chunks to stream between its first loads and its partial result,
// and leave fewer partial results to merge; 4096 positions still make 16 ranges, 16 blocks a
// head. Ranges of 256 decoded faster than of 64 or 128 at contexts 128 and 4096
// (docs/performance.md, "The decode step").
inline constexpr int kDecodeSplitMinRows = 256;
// The most ranges of one (query row, head): what the merging kernel holds weights for.
inline constexpr int kDecodeMaxSplits = 1024;
// The region's bytes for `slots` (query row, head, range) partial results: head_dim partial
// outputs plus the range's maximum and sum each, in fp32.
size_t attention_partials_bytes(int64_t slots, int head_dim);
// The most that region needs for one decode row over a cache of `context` rows.
size_t decode_attention_partials_bytes(int64_t context, const AttentionShape& shape);

// The cache rows a one-sequence decode step at `length` positions hands attention, of a cache
// of `capacity`: the least power of two of at least kDecodeSplitMinRows rows that holds the
// length, or the whole cache. Attention sizes its launch from the rows it is handed (positions
// live on the device), so a short row is not launched blocks for rows it cannot reach, and a row
// within one range gets that range's block to itself (attention_cuda.cu); the model records one
// decode step per reach and replays it.
int64_t decode_attention_reach(int64_t length, int64_t capacity);

// Paged attention (PagedAttentionKernel) gives each (row, query head, range) a block of 4 warps.
// Rows × heads alone are too few blocks when a step carries few rows (8 rows of 32 heads: 256
// blocks on 132 multiprocessors, each walking its row's whole context), so each row's positions
// are split into ranges of at least kPagedSplitMinRows positions until there are about
// kPagedSplitBlocksPerMultiprocessor blocks per multiprocessor; from
// kPagedUnsplitBlocksPerMultiprocessor per multiprocessor the rows are not split at all: a
// split costs the merge, short ranges cost each block its start and its round trips, and too
// few blocks leave multiprocessors idle (the kernel bench's cases, docs/performance.md,
// "Measurements behind other choices").
inline constexpr int kPagedSplitMinRows = 256;
inline constexpr int kPagedSplitBlocksPerMultiprocessor = 16;
inline constexpr int kPagedUnsplitBlocksPerMultiprocessor = 6;
struct AttentionSplits {
  int64_t span = 0;  // positions per range, a multiple of kPagedSplitMinRows
  int splits = 1;    // ranges per row; 1: the blocks write the normalised output directly
};

// With 16-bit caches of head_dim 64 or 128 a block can attend for several query heads of one KV
// head (kPagedGroupHeads, or the largest power of two in a smaller group), reading the KV head's
// rows once for all of them and sharing its lanes' work over them: with a block per query head a
// grouped-query step is bound by the blocks' arithmetic, not by its bytes. Its rows go unsplit
// where their query heads alone would fill the GPU, as for blocks of one head (there fewer,
// longer blocks measured faster); otherwise its ranges are counted on its own blocks. It is
// taken only while its blocks, ranges counted, number kPagedGroupedBlocksPerMultiprocessor a
// multiprocessor; LLaMA-3-8B's batched steps measured faster so at 8 and 32 rows of 512 and
// 4096 positions (docs/performance.md, "Measurements behind other choices").
inline constexpr int kPagedGroupHeads = 4;
inline constexpr double kPagedGroupedBlocksPerMultiprocessor = 1.5;
// Blocks a KV head of `group` query heads takes at `heads_per_block` heads a block (the last of
// them holds the rest where heads_per_block does not divide the group), and the blocks of a row's
// range, one per KV head's share.
constexpr int paged_blocks_per_kv_head(int group, int heads_per_block) {
  return (group + heads_per_block - 1) / heads_per_block;
}
constexpr int paged_blocks_per_range(const AttentionShape& shape, int heads_per_block) {
  return shape.n_kv_heads * paged_blocks_per_kv_head(shape.group(), heads_per_block);
}

// The ranges for `rows` rows whose block tables reach `reach` positions, on a GPU of
// `multiprocessors`, in blocks of `heads_per_block` query heads: one when rows × query heads
// already reach the target, else as many as make the blocks reach it, each of at least
// kPagedSplitMinRows positions, at most kDecodeMaxSplits. A row shorter than `reach` leaves its
// later ranges empty (their blocks exit at once).
AttentionSplits paged_attention_splits(int64_t rows, int64_t reach, const AttentionShape& shape,
                                       int multiprocessors, int heads_per_block = 1);
struct PagedLayout {
  int heads_per_block = 1;  // query heads of one KV head a block attends for
  AttentionSplits ranges;
};
// The query heads a block attends for and the ranges of a paged step; one head a block where
// `can_group` is false (caches the grouped kernel does not read).
PagedLayout paged_attention_layout(int64_t rows, int64_t reach, const AttentionShape& shape, int multiprocessors,
                                   bool can_group);
// The most the partials region needs for paged steps of 1 to `max_rows` rows whose tables reach
// `reach` positions, whichever caches they read.
size_t paged_attention_partials_bytes(int64_t max_rows, int64_t reach, const AttentionShape& shape,
                                      int multiprocessors);

}  // namespace kuiper::op
