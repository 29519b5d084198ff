#include "kuiper/op/layers.h"

namespace kuiper::op {
namespace {

constexpr int index_of(DataType d) { return static_cast<int>(d); }

// A kernel's failure, named after the layer that called it.
Status named(const std::string& name, Status status) {
  if (status.ok()) return status;
  return Status(status.code(), name + ": " + status.message());
}

}  // namespace

Status Embedding::forward(const Tensor& tokens, Tensor& out, const ExecutionContext& ctx) const {
  const DeviceType device = table_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).embedding[index_of(table_.dtype())],
                                                   "embedding", device, table_.dtype()));
  return kernel(tokens, table_, out, ctx);
}

Status MatMul::forward(const Tensor& in, Tensor& out, const ExecutionContext& ctx) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).matmul[index_of(weight_.dtype())],
                                                   "matmul", device, weight_.dtype()));
  return named(name_, kernel(in, weight_, out, ctx));
}

Status MatMul::forward_decode(DecodeGemv gemv, const ExecutionContext& ctx) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).decode_gemv[index_of(weight_.dtype())],
                                                   "decode_gemv", device, weight_.dtype()));
  gemv.weight = &weight_;
  return named(name_, kernel(gemv, ctx));
}

Status RmsNorm::forward(const Tensor& in, Tensor& out, const ExecutionContext& ctx) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).rmsnorm, "rmsnorm", device));
  return kernel(in, weight_, eps_, out, ctx);
}

Status RmsNorm::forward_residual(Tensor& x, const Tensor& residual, Tensor& out, const ExecutionContext& ctx) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).add_rmsnorm, "add_rmsnorm", device));
  return kernel(x, residual, weight_, eps_, out, ctx);
}

Status Rope::forward(Tensor& q, Tensor& k, const Tensor& positions, const ExecutionContext& ctx) const {
  const DeviceType device = q.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).rope, "rope", device));
  return kernel(q, k, positions, cos_, sin_, head_dim_, ctx);
}

Status Rope::forward_stacked(const Tensor& qkv, const Tensor& positions, const Tensor& slots, Tensor& q,
                             Tensor& k_cache, Tensor& v_cache, const ExecutionContext& ctx) const {
  const DeviceType device = q.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).rope_kv_store, "rope_kv_store", device));
  return kernel(qkv, target(positions, &slots, static_cast<int>(q.dim(-1)), k_cache, v_cache), q, ctx);
}

Status Attention::store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                        Tensor& v_cache, const ExecutionContext& ctx) const {
  const DeviceType device = k.device();
  const DataType cache_dtype = k_cache.dtype();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).kv_store[index_of(cache_dtype)],
                                                   "kv_store", device, cache_dtype));
  return kernel(k, v, slots, k_cache, v_cache, ctx);
}

Status Attention::attend(const Tensor& q, const Tensor& positions, const Tensor& k_cache, const Tensor& v_cache,
                         const PagedKv* paged, Tensor& out, const ExecutionContext& ctx, Tensor* out_quantized) const {
  const DeviceType device = q.device();
  const DataType cache_dtype = k_cache.dtype();
  if (out_quantized != nullptr) {
    if (paged != nullptr) return invalid_argument("attention writes its output quantized over a contiguous cache only");
    KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).attention_quantized_output[index_of(cache_dtype)],
                                                     "attention with quantized output", device, cache_dtype));
    return kernel(q, k_cache, v_cache, positions, shape_, out, *out_quantized, ctx);
  }
  if (paged != nullptr) {
    KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).paged_attention[index_of(cache_dtype)],
                                                     "paged attention", device, cache_dtype));
    return kernel(q, k_cache, v_cache, positions, *paged, shape_, out, ctx);
  }
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).attention[index_of(cache_dtype)],
                                                   "attention", device, cache_dtype));
  return kernel(q, k_cache, v_cache, positions, shape_, out, ctx);
}

Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(out.device()).swiglu, "swiglu", out.device()));
  return kernel(gate, up, out, ctx);
}

Status swiglu_stacked(const Tensor& gate_up, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel,
                          pick_kernel(kernel_table(out.device()).swiglu_stacked, "swiglu_stacked", out.device()));
  return kernel(gate_up, out, ctx);
}

Status add(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(out.device()).add, "add", out.device()));
  return kernel(a, b, out, ctx);
}

Status add_bias(Tensor& x, const Tensor& bias, const ExecutionContext& ctx) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(x.device()).add_bias, "add_bias", x.device()));
  return kernel(x, bias, ctx);
}

Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(out.device()).argmax, "argmax", out.device()));
  return kernel(logits, out, ctx);
}

}  // namespace kuiper::op
