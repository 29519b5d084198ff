// The paged KV cache's bookkeeping: a pool of fixed-size blocks (the model's cache rows, block
// b holding slots [b * block_size, (b + 1) * block_size)), reference counts, and the prefix
// cache: a full block is published under the hash of its tokens chained to the hash of the
// blocks before it, so that a later sequence whose tokens start the same way can share it
// instead of computing it again. Unreferenced published blocks stay cached until a block is
// needed and no free one is left; then the least recently used is reclaimed.
#pragma once

#include <cstdint>
#include <list>
#include <queue>
#include <span>
#include <unordered_map>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

class BlockPool {
 public:
  // The hash the chain of a sequence's first block starts from.
  static constexpr uint64_t kRootHash = 0x6b75697065722d31ull;

  BlockPool(int blocks, int block_size, bool prefix_cache);

  int block_size() const { return block_size_; }
  int total() const { return static_cast<int>(blocks_.size()); }
  // Blocks that allocate() can hand out now: free ones and unreferenced cached ones.
  int available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int referenced() const { return total() - available(); }
  int cached() const { return static_cast<int>(published_.size()); }

  // The cached blocks holding tokens[0, n * block_size) for the largest n with n * block_size
  // <= limit, each with a reference taken; `chain` receives the hash after the last one.
  std::vector<int32_t> match_prefix(std::span<const int32_t> tokens, int limit, uint64_t& chain);
  // A block with one reference; the least recently used cached block is reclaimed when no free
  // one is left. resource_exhausted when every block is referenced.
  StatusOr<int32_t> allocate();
  // Publishes full block `block`, holding `tokens` after the chain hash `parent`, and returns
  // its chain hash. A block with the same tokens already published stays the cached one.
  uint64_t publish(int32_t block, uint64_t parent, std::span<const int32_t> tokens);
  // Drops one reference; an unreferenced block becomes free, or cached if published.
  void release(int32_t block);

  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);

 private:
  struct Block {
    int refs = 0;
    bool published = false;
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;  // published only: checked on a match, against hash collisions
    std::list<int32_t>::iterator lru;  // valid while published and unreferenced
  };
  // The published block holding `tokens` after `parent`, or -1.
  int32_t find(uint64_t parent, std::span<const int32_t> tokens) const;
  void take(int32_t block);  // one more reference; leaves the LRU list
  void unpublish(int32_t block);

  int block_size_;
  bool prefix_cache_;
  std::vector<Block> blocks_;
  // Lowest ids first, so that one sequence alone gets blocks 0, 1, 2, ...: slot == position,
  // the contiguous case that the fused single-sequence path runs (LlamaModel::forward_step).
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> free_;
  std::list<int32_t> lru_;  // unreferenced published blocks, least recently used first
  std::unordered_map<uint64_t, int32_t> published_;  // chain hash → block
};

}  // namespace kuiper
