#include "kuiper/op/layers.h"

namespace kuiper::op {
namespace {

constexpr int index_of(DataType d) { return static_cast<int>(d); }

}  // namespace

Status Embedding::forward(const Tensor& tokens, Tensor& out, Stream stream) const {
  const DeviceType device = table_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).embedding[index_of(table_.dtype())],
                                                   "embedding", device, table_.dtype()));
  return kernel(tokens, table_, out, stream);
}

Status MatMul::forward(const Tensor& in, Tensor& out, Stream stream) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).matmul[index_of(weight_.dtype())],
                                                   "matmul", device, weight_.dtype()));
  Status status = kernel(in, weight_, out, stream);
  if (!status.ok()) return Status(status.code(), name_ + ": " + status.message());
  return status;
}

Status RmsNorm::forward(const Tensor& in, Tensor& out, Stream stream) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).rmsnorm, "rmsnorm", device));
  return kernel(in, weight_, eps_, out, stream);
}

Status RmsNorm::forward_residual(Tensor& x, const Tensor& residual, Tensor& out, Stream stream) const {
  const DeviceType device = weight_.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).add_rmsnorm, "add_rmsnorm", device));
  return kernel(x, residual, weight_, eps_, out, stream);
}

Status Rope::forward(Tensor& q, Tensor& k, const Tensor& positions, Stream stream) const {
  const DeviceType device = q.device();
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(device).rope, "rope", device));
  return kernel(q, k, positions, cos_, sin_, head_dim_, stream);
}

Status Attention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& positions, Tensor& k_cache, Tensor& v_cache, Tensor& out,
                          Stream stream) const {
  const DeviceType device = q.device();
  const DataType cache_dtype = k_cache.dtype();
  const KernelTable& table = kernel_table(device);
  KUIPER_ASSIGN_OR_RETURN(auto store, pick_kernel(table.kv_store[index_of(cache_dtype)], "kv_store",
                                                  device, cache_dtype));
  KUIPER_ASSIGN_OR_RETURN(auto attend, pick_kernel(table.attention[index_of(cache_dtype)],
                                                   "attention", device, cache_dtype));
  KUIPER_RETURN_IF_ERROR(store(k, v, positions, k_cache, v_cache, stream));
  return attend(q, k_cache, v_cache, positions, shape_, out, stream);
}

Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, Stream stream) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(out.device()).swiglu, "swiglu", out.device()));
  return kernel(gate, up, out, stream);
}

Status add(const Tensor& a, const Tensor& b, Tensor& out, Stream stream) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(out.device()).add, "add", out.device()));
  return kernel(a, b, out, stream);
}

Status argmax(const Tensor& logits, Tensor& out, Stream stream) {
  KUIPER_ASSIGN_OR_RETURN(auto kernel, pick_kernel(kernel_table(out.device()).argmax, "argmax", out.device()));
  return kernel(logits, out, stream);
}

}  // namespace kuiper::op
