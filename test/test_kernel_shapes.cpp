// The launch shapes every backend shares (op/kernel_shapes.h) that need no device: how paged
// attention splits each row's positions into ranges, and the scratch a model plans for them.
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

TEST(PagedAttentionSplits, PlannedScratchHoldsEveryRowCount) {
  for (int64_t reach : {int64_t{64}, int64_t{512}, int64_t{4096}, int64_t{32768}}) {
    const int64_t max_rows = 512;
    const size_t planned = op::paged_attention_partials_bytes(max_rows, reach, kLlama2, kH100);
    size_t most = 0;
    for (int64_t rows = 1; rows <= max_rows; ++rows) {
      const AttentionSplits s = paged_attention_splits(rows, reach, kLlama2, kH100);
      const size_t needed =
          s.splits > 1 ? op::attention_partials_bytes(rows * kLlama2.n_heads * s.splits, kLlama2.head_dim) : 0;
      EXPECT_LE(needed, planned) << "reach " << reach << ", rows " << rows;
      most = std::max(most, needed);
    }
    EXPECT_EQ(planned, most) << "reach " << reach;  // and no more than the largest need
  }
}

}  // namespace
}  // namespace kuiper
