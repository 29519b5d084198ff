#include "kuiper/engine/block_pool.h"

#include <algorithm>

namespace kuiper {

BlockPool::BlockPool(int blocks, int block_size, bool prefix_cache)
    : block_size_(block_size), prefix_cache_(prefix_cache), blocks_(blocks) {
  for (int32_t b = 0; b < blocks; ++b) free_.push(b);
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a final avalanche (splitmix64).
  uint64_t h = 0xcbf29ce484222325ull ^ parent;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

int32_t BlockPool::find(uint64_t parent, std::span<const int32_t> tokens) const {
  const auto it = published_.find(chain_hash(parent, tokens));
  if (it == published_.end()) return -1;
  const Block& b = blocks_[it->second];
  const bool same = b.parent == parent && std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end());
  return same ? it->second : -1;
}

void BlockPool::take(int32_t block) {
  Block& b = blocks_[block];
  if (b.refs++ == 0 && b.published) lru_.erase(b.lru);
}

std::vector<int32_t> BlockPool::match_prefix(std::span<const int32_t> tokens, int limit, uint64_t& chain) {
  chain = kRootHash;
  std::vector<int32_t> matched;
  if (!prefix_cache_) return matched;
  const size_t usable = std::min<size_t>(tokens.size(), static_cast<size_t>(std::max(limit, 0)));
  for (size_t begin = 0; begin + block_size_ <= usable; begin += block_size_) {
    const auto block_tokens = tokens.subspan(begin, block_size_);
    const int32_t block = find(chain, block_tokens);
    if (block < 0) break;
    take(block);
    matched.push_back(block);
    chain = blocks_[block].hash;
  }
  return matched;
}

void BlockPool::unpublish(int32_t block) {
  Block& b = blocks_[block];
  published_.erase(b.hash);
  b.published = false;
  b.tokens.clear();
}

StatusOr<int32_t> BlockPool::allocate() {
  int32_t block = -1;
  if (!free_.empty()) {
    block = free_.top();
    free_.pop();
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    unpublish(block);
  } else {
    return resource_exhausted("all " + std::to_string(total()) + " KV cache blocks are in use");
  }
  blocks_[block].refs = 1;
  return block;
}

uint64_t BlockPool::publish(int32_t block, uint64_t parent, std::span<const int32_t> tokens) {
  const uint64_t hash = chain_hash(parent, tokens);
  Block& b = blocks_[block];
  if (!prefix_cache_ || b.published || published_.count(hash) != 0) return hash;
  b.published = true;
  b.hash = hash;
  b.parent = parent;
  b.tokens.assign(tokens.begin(), tokens.end());
  published_.emplace(hash, block);
  return hash;
}

void BlockPool::release(int32_t block) {
  Block& b = blocks_[block];
  if (--b.refs > 0) return;
  if (b.published) {
    b.lru = lru_.insert(lru_.end(), block);
  } else {
    free_.push(block);
  }
}

}  // namespace kuiper
