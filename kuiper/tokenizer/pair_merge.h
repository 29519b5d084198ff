// The merge loop all three BPE flavours share: repeatedly replace the best adjacent pair of
// tokens by the token it forms, until no adjacent pair forms one. "Best" is the lowest
// priority; among equals, the leftmost pair. llama2.c (highest score), tiktoken (lowest rank of
// the merged bytes) and HF (lowest merge rank) differ only in how they rank a pair.
//
// A heap of candidate pairs with lazy invalidation makes this O(n log n) in the length of the
// piece, where the textbook rescan after every merge is O(n²); the leftmost-on-ties rule is
// kept by ordering equal priorities by position, which never changes order under merging.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace kuiper {

struct PairMerge {
  double priority;  // lower merges first
  int32_t merged_id;
};

// What (left, right) merges into, if anything.
using PairMergeRule = std::function<std::optional<PairMerge>(int32_t left, int32_t right)>;

// Merges `ids` in place.
void merge_pairs(std::vector<int32_t>& ids, const PairMergeRule& rule);

}  // namespace kuiper
