// The launch shapes every backend shares (op/kernel_shapes.h) that need no device: the cache
// rows a one-sequence decode step hands attention, how paged attention splits each row's
// positions into ranges and groups query heads into blocks, and the scratch a model plans for
// them.
#include <algorithm>
#include <cstdint>

#include <gtest/gtest.h>

#include "kuiper/op/kernel_shapes.h"

namespace kuiper {
namespace {

using op::AttentionShape;
using op::AttentionSplits;
using op::paged_attention_splits;

constexpr AttentionShape kLlama2{32, 32, 128};
constexpr int kH100 = 132;  // multiprocessors

TEST(DecodeAttentionReach, PowersOfTwoFromOneRangeUpToTheCache) {
  EXPECT_EQ(op::decode_attention_reach(1, 4160), op::kDecodeSplitMinRows);
  EXPECT_EQ(op::decode_attention_reach(op::kDecodeSplitMinRows, 4160), op::kDecodeSplitMinRows);
  EXPECT_EQ(op::decode_attention_reach(op::kDecodeSplitMinRows + 1, 4160), 2 * op::kDecodeSplitMinRows);
  EXPECT_EQ(op::decode_attention_reach(1025, 4160), 2048);
  EXPECT_EQ(op::decode_attention_reach(4096, 4160), 4096);
  EXPECT_EQ(op::decode_attention_reach(4097, 4160), 4160);
  EXPECT_EQ(op::decode_attention_reach(4160, 4160), 4160);
  // A cache shorter than one range is handed whole.
  EXPECT_EQ(op::decode_attention_reach(1, 100), 100);
  EXPECT_EQ(op::decode_attention_reach(100, 100), 100);
}

TEST(PagedAttentionSplits, FewRowsSplitUntilTheGpuIsFull) {
  // 8 rows of 32 heads are 256 blocks; 16 a multiprocessor want 2112, so 9 ranges, which ranges
  // of whole 256-position units turn into 8.
  AttentionSplits s = paged_attention_splits(8, 4096, kLlama2, kH100);
  EXPECT_EQ(s.span, 512);
  EXPECT_EQ(s.splits, 8);
  s = paged_attention_splits(8, 512, kLlama2, kH100);  // 2 units of 256: one each
  EXPECT_EQ(s.span, 256);
  EXPECT_EQ(s.splits, 2);
  s = paged_attention_splits(1, 4096, kLlama2, kH100);  // every unit a range
  EXPECT_EQ(s.span, 256);
  EXPECT_EQ(s.splits, 16);
  EXPECT_EQ(paged_attention_splits(32, 512, kLlama2, kH100).splits, 1);   // 1024 blocks: 7.8 a multiprocessor
  EXPECT_EQ(paged_attention_splits(24, 4096, kLlama2, kH100).splits, 3);  // 768 blocks: 5.8
  EXPECT_EQ(paged_attention_splits(8, 256, kLlama2, kH100).splits, 1);    // one unit of 256
}

TEST(PagedAttentionSplits, RangesCoverTheReachInWholeUnits) {
  for (int multiprocessors : {1, 8, kH100}) {
    for (int64_t reach : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{800},
                          int64_t{4096}, int64_t{1} << 20}) {
      for (int64_t rows = 1; rows <= 300; rows += 7) {
        for (const AttentionShape& shape : {kLlama2, AttentionShape{4, 1, 64}}) {
          const AttentionSplits s = paged_attention_splits(rows, reach, shape, multiprocessors);
          SCOPED_TRACE(testing::Message() << multiprocessors << " SMs, reach " << reach << ", rows " << rows
                                          << ", heads " << shape.n_heads);
          EXPECT_GE(s.splits, 1);
          EXPECT_LE(s.splits, op::kDecodeMaxSplits);
          EXPECT_GT(s.span, 0);
          EXPECT_EQ(s.span % op::kPagedSplitMinRows, 0);
          EXPECT_GE(s.span * s.splits, reach);                       // every position in a range
          EXPECT_LT((s.splits - 1) * s.span, std::max<int64_t>(reach, 1));  // no range wholly past it
          if (rows * shape.n_heads >= int64_t{op::kPagedUnsplitBlocksPerMultiprocessor} * multiprocessors) {
            EXPECT_EQ(s.splits, 1);
          }
        }
      }
    }
  }
}

constexpr AttentionShape kLlama3{32, 8, 128};  // groups of 4 query heads

TEST(PagedAttentionLayout, GroupsQueryHeadsWhileTheBlocksStillNumberOneAndAHalfAMultiprocessor) {
  // 198 blocks on 132 multiprocessors. LLaMA-3-8B in blocks of 4 heads: 32 rows (1,024 query
  // heads, 6 blocks of one head a multiprocessor) go unsplit, 256 blocks; 8 rows take ranges
  // until 64 blocks reach 2,112, which tables of 4,464 positions (18 units of 256; llama_bench's
  // for contexts up to 4096) cap at 18: 1,152 blocks. One row of 8 blocks in 18 ranges is 144:
  // blocks of one head.
  op::PagedLayout l = op::paged_attention_layout(32, 4464, kLlama3, kH100, true);
  EXPECT_EQ(l.heads_per_block, 4);
  EXPECT_EQ(l.ranges.splits, 1);
  l = op::paged_attention_layout(8, 4464, kLlama3, kH100, true);
  EXPECT_EQ(l.heads_per_block, 4);
  EXPECT_EQ(l.ranges.splits, 18);
  EXPECT_EQ(l.ranges.span, 256);
  EXPECT_EQ(paged_attention_splits(8, 4464, kLlama3, kH100).splits, 9);  // 256 blocks of one head want 9
  l = op::paged_attention_layout(1, 4464, kLlama3, kH100, true);
  EXPECT_EQ(l.heads_per_block, 1);
  EXPECT_EQ(l.ranges.splits, 18);
  EXPECT_EQ(op::paged_attention_layout(2, 512, kLlama3, kH100, true).heads_per_block, 1);  // 16 blocks, 2 ranges
  EXPECT_EQ(op::paged_attention_layout(32, 4464, kLlama3, kH100, false).heads_per_block, 1);  // not a 16-bit cache
  EXPECT_EQ(op::paged_attention_layout(64, 4096, kLlama2, kH100, true).heads_per_block, 1);   // groups of one
  // Groups of 3 take blocks of 2 (and 1), groups of 7 of 4 (and 3): two blocks a KV head.
  EXPECT_EQ(op::paged_attention_layout(64, 4096, AttentionShape{6, 2, 64}, kH100, true).heads_per_block, 2);
  l = op::paged_attention_layout(64, 4096, AttentionShape{28, 4, 128}, kH100, true);
  EXPECT_EQ(l.heads_per_block, 4);
  EXPECT_EQ(l.ranges.splits, 1);  // 1,792 query heads
  EXPECT_EQ(op::paged_blocks_per_kv_head(7, 4), 2);
  EXPECT_EQ(op::paged_blocks_per_range(AttentionShape{28, 4, 128}, 4), 8);  // 4 KV heads, blocks of 4 and 3
}

TEST(PagedAttentionLayout, GroupedBlocksKeepTheirNumberAndRanges) {
  for (int multiprocessors : {1, 8, kH100}) {
    for (int64_t reach : {int64_t{64}, int64_t{800}, int64_t{4096}, int64_t{32768}}) {
      for (int64_t rows = 1; rows <= 300; rows += 7) {
        for (const AttentionShape& shape : {kLlama3, AttentionShape{28, 4, 128}, AttentionShape{3, 1, 64}}) {
          SCOPED_TRACE(testing::Message() << multiprocessors << " SMs, reach " << reach << ", rows " << rows
                                          << ", heads " << shape.n_heads << "/" << shape.n_kv_heads);
          const op::PagedLayout l = op::paged_attention_layout(rows, reach, shape, multiprocessors, true);
          const int group = shape.group();
          EXPECT_TRUE(l.heads_per_block == 1 || l.heads_per_block == std::min(group == 3 ? 2 : group, 4));
          const AttentionSplits own = paged_attention_splits(rows, reach, shape, multiprocessors, l.heads_per_block);
          EXPECT_EQ(l.ranges.span, own.span);
          EXPECT_EQ(l.ranges.splits, own.splits);
          EXPECT_GE(own.span * own.splits, reach);
          EXPECT_LT((own.splits - 1) * own.span, std::max<int64_t>(reach, 1));
          if (rows * shape.n_heads >= int64_t{op::kPagedUnsplitBlocksPerMultiprocessor} * multiprocessors) {
            EXPECT_EQ(own.splits, 1);
          }
          if (l.heads_per_block > 1) {
            EXPECT_GE(rows * op::paged_blocks_per_range(shape, l.heads_per_block) * own.splits,
                      op::kPagedGroupedBlocksPerMultiprocessor * multiprocessors);
          }
        }
      }
    }
  }
}

TEST(PagedAttentionSplits, PlannedScratchHoldsEveryRowCount) {
  // Whatever the cache: blocks of several heads can take more ranges than blocks of one.
  for (const AttentionShape& shape : {kLlama2, kLlama3}) {
    for (int64_t reach : {int64_t{64}, int64_t{512}, int64_t{4096}, int64_t{32768}}) {
      const int64_t max_rows = 512;
      const size_t planned = op::paged_attention_partials_bytes(max_rows, reach, shape, kH100);
      size_t most = 0;
      for (int64_t rows = 1; rows <= max_rows; ++rows) {
        for (bool can_group : {false, true}) {
          const AttentionSplits s = op::paged_attention_layout(rows, reach, shape, kH100, can_group).ranges;
          const size_t needed =
              s.splits > 1 ? op::attention_partials_bytes(rows * shape.n_heads * s.splits, shape.head_dim) : 0;
          EXPECT_LE(needed, planned) << "reach " << reach << ", rows " << rows;
          most = std::max(most, needed);
        }
      }
      EXPECT_EQ(planned, most) << "reach " << reach;  // and no more than the largest need
    }
  }
}

}  // namespace
}  // namespace kuiper
