#include "kuiper/checkpoint/random_checkpoint.h"

#include <cmath>

#include "kuiper/base/half.h"

namespace kuiper {
namespace {

// splitmix64: a counter-based generator, so every element can be drawn independently (and in
// parallel) from (seed, tensor id, index).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = mix(seed ^ mix(stream * 0x100000001b3ull + index));
  return static_cast<float>(bits >> 40) / static_cast<float>(1ull << 24) * 2.f - 1.f;  // [-1, 1)
}

class RandomFiller {
 public:
  RandomFiller(uint64_t seed, DataType dtype) : seed_(seed), dtype_(dtype) {}

  StatusOr<Tensor> tensor(DataType dtype, const Shape& shape, float center, float scale) {
    KUIPER_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape, cpu_allocator()));
    const uint64_t stream = next_stream_++;
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      const float v = center + scale * uniform(seed_, stream, static_cast<uint64_t>(i));
      if (dtype == DataType::kFP32) t.data<float>()[i] = v;
      else if (dtype == DataType::kBF16) t.data<uint16_t>()[i] = float_to_bf16(v);
      else t.data<uint16_t>()[i] = float_to_fp16(v);
    }
    return t;
  }

  StatusOr<op::Weight> matrix(int64_t rows, int64_t cols) {
    KUIPER_ASSIGN_OR_RETURN(Tensor values, tensor(dtype_, {rows, cols}, 0.f, 1.f / std::sqrt(static_cast<float>(cols))));
    return op::Weight{std::move(values), Tensor(), 0};
  }

  StatusOr<Tensor> norm(int64_t n) { return tensor(DataType::kFP32, {n}, 1.f, 0.1f); }

 private:
  uint64_t seed_;
  DataType dtype_;
  uint64_t next_stream_ = 0;
};

}  // namespace

StatusOr<Checkpoint> make_random_checkpoint(const LlamaConfig& config, uint64_t seed, DataType dtype) {
  KUIPER_RETURN_IF_ERROR(config.validate());
  if (dtype != DataType::kFP32 && dtype != DataType::kFP16 && dtype != DataType::kBF16) {
    return invalid_argument("random checkpoints are fp32, fp16 or bf16");
  }
  RandomFiller fill(seed, dtype);
  Checkpoint ckpt{config, {}, "random (" + std::string(dtype_name(dtype)) + ")", "<random>", {}};
  LlamaWeights& w = ckpt.weights;
  const int64_t dim = config.dim, q_dim = int64_t{config.n_heads} * config.head_dim(),
                kv = config.kv_dim(), hidden = config.hidden_dim;
  KUIPER_ASSIGN_OR_RETURN(w.token_embedding, fill.matrix(config.vocab_size, dim));
  w.layers.resize(config.n_layers);
  for (LlamaLayerWeights& l : w.layers) {
    KUIPER_ASSIGN_OR_RETURN(l.attention_norm, fill.norm(dim));
    KUIPER_ASSIGN_OR_RETURN(l.wq, fill.matrix(q_dim, dim));
    KUIPER_ASSIGN_OR_RETURN(l.wk, fill.matrix(kv, dim));
    KUIPER_ASSIGN_OR_RETURN(l.wv, fill.matrix(kv, dim));
    KUIPER_ASSIGN_OR_RETURN(l.wo, fill.matrix(dim, q_dim));
    KUIPER_ASSIGN_OR_RETURN(l.ffn_norm, fill.norm(dim));
    KUIPER_ASSIGN_OR_RETURN(l.w1, fill.matrix(hidden, dim));
    KUIPER_ASSIGN_OR_RETURN(l.w2, fill.matrix(dim, hidden));
    KUIPER_ASSIGN_OR_RETURN(l.w3, fill.matrix(hidden, dim));
  }
  KUIPER_ASSIGN_OR_RETURN(w.final_norm, fill.norm(dim));
  if (config.shared_classifier) {
    w.classifier = w.token_embedding;
  } else {
    KUIPER_ASSIGN_OR_RETURN(w.classifier, fill.matrix(config.vocab_size, dim));
  }
  return ckpt;
}

}  // namespace kuiper
