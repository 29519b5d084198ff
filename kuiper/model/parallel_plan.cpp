#include "kuiper/model/parallel_plan.h"

#include <string>

namespace kuiper {
namespace {

// Rows [rank · n / ranks, (rank + 1) · n / ranks) of something n long that divides evenly.
std::pair<int64_t, int64_t> share(int64_t n, int rank, int ranks) { return {n / ranks * rank, n / ranks * (rank + 1)}; }

}  // namespace

Status ParallelPlan::check(const LlamaConfig& c, int ranks) {
  if (ranks < 1) return invalid_argument("--tp must be at least 1");
  for (auto [count, what] : {std::pair{c.n_heads, "query heads"}, {c.n_kv_heads, "key/value heads"},
                             {c.hidden_dim, "feed-forward width"}}) {
    if (count % ranks != 0) {
      return invalid_argument("cannot split this model " + std::to_string(ranks) + " ways: its " +
                              std::to_string(count) + " " + what + " do not divide by " + std::to_string(ranks));
    }
  }
  return ok_status();
}

StatusOr<ParallelPlan> ParallelPlan::make(const LlamaConfig& config, parallel::Communicator& comm) {
  KUIPER_RETURN_IF_ERROR(check(config, comm.ranks()));
  ParallelPlan plan;
  plan.rank = comm.rank();
  plan.ranks = comm.ranks();
  plan.comm = plan.ranks > 1 ? &comm : nullptr;
  // A vocabulary that does not divide stays whole on every rank: each computes all logits.
  plan.split_vocab = plan.ranks > 1 && config.vocab_size % plan.ranks == 0;
  return plan;
}

LlamaConfig ParallelPlan::rank_config(const LlamaConfig& whole) const {
  LlamaConfig c = whole;
  c.head_size = whole.head_dim();  // no longer dim / n_heads once the heads are divided
  c.n_heads = whole.n_heads / ranks;
  c.n_kv_heads = whole.n_kv_heads / ranks;
  c.hidden_dim = whole.hidden_dim / ranks;
  return c;
}

StatusOr<LlamaWeights> ParallelPlan::rank_weights(const LlamaConfig& whole, const LlamaWeights& w,
                                                  Allocator& alloc) const {
  if (ranks == 1) return w;
  const auto [q0, q1] = share(whole.q_dim(), rank, ranks);
  const auto [kv0, kv1] = share(whole.kv_dim(), rank, ranks);
  const auto [h0, h1] = share(whole.hidden_dim, rank, ranks);
  const auto rows = [](const Tensor& v, int64_t first, int64_t last) -> StatusOr<Tensor> {
    return v.is_empty() ? StatusOr<Tensor>(Tensor()) : v.slice(first, last);
  };
  LlamaWeights mine{w.token_embedding, {}, w.final_norm, w.classifier};
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LlamaLayerWeights& src = w.layers[l];
    LlamaLayerWeights dst = src;  // norms and the row-parallel biases stay whole
    KUIPER_ASSIGN_OR_RETURN(dst.wq, src.wq.slice_rows(q0, q1));
    KUIPER_ASSIGN_OR_RETURN(dst.wk, src.wk.slice_rows(kv0, kv1));
    KUIPER_ASSIGN_OR_RETURN(dst.wv, src.wv.slice_rows(kv0, kv1));
    KUIPER_ASSIGN_OR_RETURN(dst.w1, src.w1.slice_rows(h0, h1));
    KUIPER_ASSIGN_OR_RETURN(dst.w3, src.w3.slice_rows(h0, h1));
    KUIPER_ASSIGN_OR_RETURN(dst.bq, rows(src.bq, q0, q1));
    KUIPER_ASSIGN_OR_RETURN(dst.bk, rows(src.bk, kv0, kv1));
    KUIPER_ASSIGN_OR_RETURN(dst.bv, rows(src.bv, kv0, kv1));
    KUIPER_ASSIGN_OR_RETURN(dst.b1, rows(src.b1, h0, h1));
    KUIPER_ASSIGN_OR_RETURN(dst.b3, rows(src.b3, h0, h1));
    const auto named = [l](const Status& s, const char* matrix) {
      return Status(s.code(), "layer " + std::to_string(l) + " " + matrix + ": " + s.message());
    };
    StatusOr<op::Weight> wo = src.wo.slice_cols(q0, q1, alloc);
    if (!wo.ok()) return named(wo.status(), "wo");
    StatusOr<op::Weight> w2 = src.w2.slice_cols(h0, h1, alloc);
    if (!w2.ok()) return named(w2.status(), "w2");
    dst.wo = std::move(*wo);
    dst.w2 = std::move(*w2);
    mine.layers.push_back(std::move(dst));
  }
  return mine;
}

std::pair<int64_t, int64_t> ParallelPlan::vocab_rows(int64_t vocab) const {
  return split_vocab ? share(vocab, rank, ranks) : std::pair<int64_t, int64_t>{0, vocab};
}

Status ParallelPlan::sum_partials(Tensor& partial, Stream stream) const {
  return comm == nullptr ? ok_status() : comm->all_reduce_sum(partial, stream);
}

StatusOr<Tensor> ParallelPlan::collective_tensor(Shape shape, Allocator& alloc) const {
  if (comm == nullptr) return Tensor::empty(DataType::kFP32, std::move(shape), alloc);
  return comm->shared_tensor(std::move(shape));
}

}  // namespace kuiper
