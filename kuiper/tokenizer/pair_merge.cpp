#include "kuiper/tokenizer/pair_merge.h"

#include <queue>

namespace kuiper {
namespace {

struct Candidate {
  double priority;
  int32_t merged_id;
  size_t left;              // position of the left token
  size_t right;             // position of the right token when the candidate was made
  uint32_t left_version;    // the tokens' versions then: a merge at either position
  uint32_t right_version;   // makes the candidate stale
};

struct WorseCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.left > b.left;
  }
};

}  // namespace

void merge_pairs(std::vector<int32_t>& ids, const PairMergeRule& rule) {
  const size_t n = ids.size();
  if (n < 2) return;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> next(n), prev(n);
  std::vector<uint32_t> version(n, 0);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : kNone;
    prev[i] = i > 0 ? i - 1 : kNone;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, WorseCandidate> heap;
  auto consider = [&](size_t left) {
    if (left == kNone || next[left] == kNone) return;
    const size_t right = next[left];
    if (auto merge = rule(ids[left], ids[right])) {
      heap.push({merge->priority, merge->merged_id, left, right, version[left], version[right]});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const bool stale = !alive[c.left] || !alive[c.right] || next[c.left] != c.right ||
                       version[c.left] != c.left_version || version[c.right] != c.right_version;
    if (stale) continue;
    ids[c.left] = c.merged_id;
    ++version[c.left];
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.left] != kNone) prev[next[c.left]] = c.left;
    consider(prev[c.left]);
    consider(c.left);
  }

  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) ids[out++] = ids[i];
  }
  ids.resize(out);
}

}  // namespace kuiper
