// How one model is split over the ranks of a tensor-parallel group, in Megatron-LM's layout:
// the column-parallel wq, wk, wv, w1 and w3 give each rank whole heads, whole KV heads and a
// slice of the feed-forward width; the row-parallel wo and w2 then leave each rank a partial
// sum of the residual update, which the ranks add up (one all-reduce after each). The
// classifier is split by vocabulary and the ranks gather its logits. The token embedding is
// kept whole on every rank: a lookup reads one row, and a split one would cost a third
// collective per step for memory that is small beside the layers.
//
// This is the one place that knows the split: LlamaModel is built from a rank's config and
// weights and asks the plan at its two sums and at the logits. One rank is the plan of the
// whole model, where both are no-ops.
#pragma once

#include <utility>

#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_weights.h"
#include "kuiper/parallel/communicator.h"

namespace kuiper {

struct ParallelPlan {
  int rank = 0;
  int ranks = 1;
  parallel::Communicator* comm = nullptr;  // null on one rank
  bool split_vocab = false;                // the classifier's rows are divided over the ranks

  // The plan of rank `comm.rank()`; an error naming what in `config` does not divide `ranks`
  // ways (query heads, KV heads, feed-forward width, or quantization groups of wo and w2).
  static StatusOr<ParallelPlan> make(const LlamaConfig& config, parallel::Communicator& comm);
  // Why `config` cannot be split `ranks` ways (ok when it can).
  static Status check(const LlamaConfig& config, int ranks);

  // This rank's share of the network: its heads, KV heads and feed-forward width. The
  // vocabulary stays whole (logits are gathered to full width).
  LlamaConfig rank_config(const LlamaConfig& whole) const;
  // This rank's weights, as rank_config shapes them: row views of the column-parallel
  // matrices and their biases, column copies of wo and w2 (in `alloc`); norms, wo's and w2's
  // biases (added once, after the sum), the token embedding and the classifier whole (the
  // model takes the classifier's vocab_rows when it places it).
  StatusOr<LlamaWeights> rank_weights(const LlamaConfig& whole, const LlamaWeights& weights, Allocator& alloc) const;
  // The classifier rows [first, last) this rank computes the logits of.
  std::pair<int64_t, int64_t> vocab_rows(int64_t vocab) const;

  // Adds the ranks' partial results of a row-parallel product, in place (nothing on one rank).
  Status sum_partials(Tensor& partial, Stream stream) const;
  // Whether this rank adds the residual stream into its partial sum of a row-parallel product,
  // so that the ranks' sum is the residual's next value (rank 0; the others give their products
  // alone). The fused decode step sums x so, with no residual add of its own after the sum.
  bool carries_residual() const { return rank == 0; }
  // An fp32 tensor for the ranks' sums and the logits' gathers to work in: on several ranks
  // the communicator's shared memory (Communicator::shared_tensor), on one `alloc`'s.
  StatusOr<Tensor> collective_tensor(Shape shape, Allocator& alloc) const;
};

}  // namespace kuiper
