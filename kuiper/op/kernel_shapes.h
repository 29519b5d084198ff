// Shape checks shared by every backend's kernels: whether the tensors handed to a kernel fit
// each other, independent of device and dtype (each backend checks those itself).
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op {

// q [T, n*head_dim], k [T, m*head_dim], positions [T], cos/sin [positions, head_dim/2].
Status check_rope_shapes(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos,
                         const Tensor& sin, int head_dim);

// q and out [T, n_heads*head_dim], caches [context, n_kv_heads*head_dim], positions [T].
Status check_attention_shapes(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const Tensor& positions, const AttentionShape& shape, const Tensor& out);

}  // namespace kuiper::op
