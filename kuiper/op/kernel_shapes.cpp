#include "kuiper/op/kernel_shapes.h"

#include <algorithm>
#include <bit>

namespace kuiper::op {

Status check_rope_shapes(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos,
                         const Tensor& sin, int head_dim) {
  const int64_t tokens = positions.numel();
  if (head_dim <= 0 || head_dim % 2 != 0 || q.dim(-1) % head_dim != 0 ||
      k.dim(-1) % head_dim != 0 || q.numel() != tokens * q.dim(-1) ||
      k.numel() != tokens * k.dim(-1) || cos.dim(-1) != head_dim / 2 ||
      cos.numel() != sin.numel()) {
    return invalid_argument("rope shapes do not fit: q " + q.describe() + ", k " + k.describe() +
                            ", positions " + positions.describe() + ", head_dim " +
                            std::to_string(head_dim));
  }
  return ok_status();
}

Status check_attention_shapes(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const Tensor& positions, const AttentionShape& shape, const Tensor& out) {
  const int n_heads = shape.n_heads, n_kv = shape.n_kv_heads, hd = shape.head_dim;
  const int64_t tokens = positions.numel();
  const int64_t q_dim = static_cast<int64_t>(n_heads) * hd, kv_dim = static_cast<int64_t>(n_kv) * hd;
  if (n_heads <= 0 || n_kv <= 0 || hd <= 0 || n_heads % n_kv != 0 || q.numel() != tokens * q_dim ||
      out.numel() != q.numel() || k_cache.dim(-1) != kv_dim || v_cache.numel() != k_cache.numel()) {
    return invalid_argument("attention shapes do not fit: q " + q.describe() + ", cache " +
                            k_cache.describe() + ", heads " + std::to_string(n_heads) + "/" +
                            std::to_string(n_kv) + " x " + std::to_string(hd));
  }
  return ok_status();
}

Status check_paged_shapes(const PagedKv& paged, const Tensor& positions, int64_t cache_rows) {
  if (paged.block_tables == nullptr || paged.row_sequence == nullptr) {
    return invalid_argument("paged attention needs block tables and each row's sequence");
  }
  const Tensor& tables = *paged.block_tables;
  if (tables.dtype() != DataType::kINT32 || paged.row_sequence->dtype() != DataType::kINT32 ||
      tables.ndim() != 2 || paged.row_sequence->numel() != positions.numel() || paged.block_size <= 0 ||
      cache_rows % paged.block_size != 0) {
    return invalid_argument("paged attention shapes do not fit: block tables " + tables.describe() +
                            ", row sequences " + paged.row_sequence->describe() + ", positions " +
                            positions.describe() + ", block size " + std::to_string(paged.block_size) +
                            ", cache rows " + std::to_string(cache_rows));
  }
  return ok_status();
}

size_t attention_partials_bytes(int64_t slots, int head_dim) {
  return static_cast<size_t>(slots) * (head_dim + 2) * sizeof(float);
}

size_t decode_attention_partials_bytes(int64_t context, const AttentionShape& shape) {
  const int64_t ranges = (context + kDecodeSplitMinRows - 1) / kDecodeSplitMinRows;
  return attention_partials_bytes(ranges * shape.n_heads, shape.head_dim);
}

int64_t decode_attention_reach(int64_t length, int64_t capacity) {
  const int64_t rows = std::max<int64_t>(kDecodeSplitMinRows, length);
  return std::min(static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(rows))), capacity);
}

AttentionSplits paged_attention_splits(int64_t rows, int64_t reach, const AttentionShape& shape,
                                       int multiprocessors, int heads_per_block) {
  // In units of kPagedSplitMinRows positions, the least a range holds.
  const int64_t units = std::max<int64_t>(1, (reach + kPagedSplitMinRows - 1) / kPagedSplitMinRows);
  const int64_t head_blocks = std::max<int64_t>(1, rows * shape.n_heads);
  const int64_t blocks = std::max<int64_t>(1, rows * paged_blocks_per_range(shape, heads_per_block));
  const int64_t target = int64_t{kPagedSplitBlocksPerMultiprocessor} * multiprocessors;
  const bool fills = head_blocks >= int64_t{kPagedUnsplitBlocksPerMultiprocessor} * multiprocessors;
  const int64_t wanted =
      fills ? 1 : std::clamp<int64_t>((target + blocks - 1) / blocks, 1, std::min<int64_t>(units, kDecodeMaxSplits));
  const int64_t units_per_range = (units + wanted - 1) / wanted;
  const int64_t splits = (units + units_per_range - 1) / units_per_range;
  return {units_per_range * kPagedSplitMinRows, static_cast<int>(splits)};
}

PagedLayout paged_attention_layout(int64_t rows, int64_t reach, const AttentionShape& shape, int multiprocessors,
                                   bool can_group) {
  int heads = 1;
  while (can_group && heads * 2 <= std::min(shape.group(), kPagedGroupHeads)) heads *= 2;
  if (heads > 1) {
    const AttentionSplits ranges = paged_attention_splits(rows, reach, shape, multiprocessors, heads);
    const int64_t blocks = rows * paged_blocks_per_range(shape, heads) * ranges.splits;
    if (blocks >= kPagedGroupedBlocksPerMultiprocessor * multiprocessors) return {heads, ranges};
  }
  return {1, paged_attention_splits(rows, reach, shape, multiprocessors)};
}

size_t paged_attention_partials_bytes(int64_t max_rows, int64_t reach, const AttentionShape& shape,
                                      int multiprocessors) {
  // Fewer rows take more ranges each, so the most is not necessarily at max_rows; blocks of
  // several heads can take more ranges than blocks of one.
  int64_t most = 0;
  for (int64_t rows = 1; rows <= max_rows; ++rows) {
    for (bool can_group : {false, true}) {
      const AttentionSplits s = paged_attention_layout(rows, reach, shape, multiprocessors, can_group).ranges;
      if (s.splits > 1) most = std::max(most, rows * shape.n_heads * s.splits);
    }
  }
  return attention_partials_bytes(most, shape.head_dim);
}

}  // namespace kuiper::op
