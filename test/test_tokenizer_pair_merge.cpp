// The heap-based merge loop against the textbook one (rescan all pairs after every merge, take
// the lowest priority, leftmost on ties), on random merge tables with many equal priorities.
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "kuiper/tokenizer/pair_merge.h"

namespace kuiper {
namespace {

using MergeTable = std::map<std::pair<int32_t, int32_t>, PairMerge>;

std::vector<int32_t> textbook_merge(std::vector<int32_t> ids, const MergeTable& table) {
  while (true) {
    size_t best = ids.size();
    PairMerge best_merge{0, 0};
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = table.find({ids[i], ids[i + 1]});
      if (it != table.end() && (best == ids.size() || it->second.priority < best_merge.priority)) {
        best = i;
        best_merge = it->second;
      }
    }
    if (best == ids.size()) return ids;
    ids[best] = best_merge.merged_id;
    ids.erase(ids.begin() + best + 1);
  }
}

TEST(TokenizerPairMerge, MatchesTextbookLoopOnRandomTables) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const int alphabet = 2 + trial % 4;  // few symbols: long runs and many competing pairs
    MergeTable table;
    std::uniform_int_distribution<int> symbol(0, alphabet + 20);
    std::uniform_int_distribution<int> priority(0, 5);  // many ties
    for (int m = 0; m < 40; ++m) {
      table.try_emplace({symbol(rng), symbol(rng)},
                        PairMerge{double(priority(rng)), alphabet + 1 + m % 20});
    }
    std::vector<int32_t> ids(std::uniform_int_distribution<int>(0, 60)(rng));
    std::uniform_int_distribution<int> start_symbol(0, alphabet - 1);
    for (int32_t& id : ids) id = start_symbol(rng);

    std::vector<int32_t> merged = ids;
    merge_pairs(merged, [&](int32_t left, int32_t right) -> std::optional<PairMerge> {
      const auto it = table.find({left, right});
      if (it == table.end()) return std::nullopt;
      return it->second;
    });
    ASSERT_EQ(merged, textbook_merge(ids, table)) << "trial " << trial;
  }
}

TEST(TokenizerPairMerge, LongRunStaysFast) {
  // "a" * n with a+a -> aa, aa+aa -> aaaa, ...: the textbook loop is quadratic here.
  std::vector<int32_t> ids(1 << 18, 0);
  merge_pairs(ids, [](int32_t left, int32_t right) -> std::optional<PairMerge> {
    if (left != right || left >= 18) return std::nullopt;
    return PairMerge{double(left), left + 1};
  });
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], 18);
}

}  // namespace
}  // namespace kuiper
