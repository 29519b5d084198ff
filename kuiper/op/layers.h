// Layer objects: each holds its parameters and reaches its kernel through the kernel table of
// the device its parameters live on. A layer never names a backend; the table does.
#pragma once

#include <string>

#include "kuiper/op/kernel_table.h"

namespace kuiper::op {

// out[t] = table[tokens[t]].
class Embedding {
 public:
  Embedding() = default;
  explicit Embedding(Weight table) : table_(std::move(table)) {}
  Status forward(const Tensor& tokens, Tensor& out, const ExecutionContext& ctx) const;
  const Weight& table() const { return table_; }

 private:
  Weight table_;
};

// out = in · weightᵀ, for any weight dtype the device's table has a kernel for.
class MatMul {
 public:
  MatMul() = default;
  MatMul(std::string name, Weight weight) : name_(std::move(name)), weight_(std::move(weight)) {}
  Status forward(const Tensor& in, Tensor& out, const ExecutionContext& ctx) const;
  // Decode (one token) with a norm before and an epilogue after, in one kernel (kernel_table.h,
  // DecodeGemv; `gemv` names everything but the weight), where the device's table has it.
  Status forward_decode(DecodeGemv gemv, const ExecutionContext& ctx) const;
  const Weight& weight() const { return weight_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  Weight weight_;
};

class RmsNorm {
 public:
  RmsNorm() = default;
  RmsNorm(Tensor weight, float eps) : weight_(std::move(weight)), eps_(eps) {}
  Status forward(const Tensor& in, Tensor& out, const ExecutionContext& ctx) const;
  // x += residual, then out = norm(x): the residual connection fused into the next norm.
  Status forward_residual(Tensor& x, const Tensor& residual, Tensor& out, const ExecutionContext& ctx) const;
  const Tensor& weight() const { return weight_; }
  float eps() const { return eps_; }

 private:
  Tensor weight_;
  float eps_ = 1e-5f;
};

// Rotary position embedding with precomputed cos/sin tables [positions, head_dim / 2].
class Rope {
 public:
  Rope() = default;
  Rope(Tensor cos, Tensor sin, int head_dim)
      : cos_(std::move(cos)), sin_(std::move(sin)), head_dim_(head_dim) {}
  Status forward(Tensor& q, Tensor& k, const Tensor& positions, const ExecutionContext& ctx) const;
  // Stacked q|k|v rows (one GEMM's output) into rotated q, and k and v into the caches at rows
  // `slots` (kernel_table.h, RopeKvStoreKernel): where the device's table has it.
  Status forward_stacked(const Tensor& qkv, const Tensor& positions, const Tensor& slots, Tensor& q,
                         Tensor& k_cache, Tensor& v_cache, const ExecutionContext& ctx) const;
  // Where stacked rows with q_rows of q go, for the kernels that rotate and store them
  // (forward_stacked, and the decode GEMV's kRopeKv epilogue); slots null: at the positions.
  RopeKvTarget target(const Tensor& positions, const Tensor* slots, int q_rows, Tensor& k_cache,
                      Tensor& v_cache) const {
    return {&positions, &cos_, &sin_, head_dim_, q_rows, &k_cache, &v_cache, slots};
  }

 private:
  Tensor cos_, sin_;
  int head_dim_ = 0;
};

// Multi-head attention with grouped-query heads over one layer's KV cache.
class Attention {
 public:
  Attention() = default;
  explicit Attention(AttentionShape shape) : shape_(shape) {}
  // Writes this chunk's keys and values into the caches at rows `slots` (their positions in a
  // contiguous cache).
  Status store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
               Tensor& v_cache, const ExecutionContext& ctx) const;
  // Attends causally over the caches, which hold this chunk's keys and values: a contiguous
  // cache where `paged` is null, else a pool of blocks read through its block tables.
  // `out_quantized`: where one row's output also goes quantized for an int8 or int4 wo
  // (kernel_table.h, AttentionQuantizedOutputKernel); contiguous caches only.
  Status attend(const Tensor& q, const Tensor& positions, const Tensor& k_cache, const Tensor& v_cache,
                const PagedKv* paged, Tensor& out, const ExecutionContext& ctx, Tensor* out_quantized = nullptr) const;

 private:
  AttentionShape shape_;
};

// out = silu(gate) * up.
Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext& ctx);
// out = silu(gate) * up, gate and up the halves of each row of gate_up (the stacked weight's
// product).
Status swiglu_stacked(const Tensor& gate_up, Tensor& out, const ExecutionContext& ctx);
// x[t, :] += bias.
Status add_bias(Tensor& x, const Tensor& bias, const ExecutionContext& ctx);
// out = a + b.
Status add(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext& ctx);
// out[r] = argmax of logits row r; -1 for a row holding NaN or Inf (kernel_table.h).
Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext& ctx);

}  // namespace kuiper::op
