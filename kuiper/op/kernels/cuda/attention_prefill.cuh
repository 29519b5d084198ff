// Prefill attention (more than one query row) on the tensor cores, for the shapes 7B-class
// models use; attention() sends every other case to the CUDA-core kernel.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cuda {

// True when tensor_core_prefill handles these tensors: an fp16 or bf16 cache, head_dim 64 or
// 128, a 16-byte aligned cache and 8-byte aligned query and output.
bool tensor_core_prefill_fits(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const AttentionShape& shape, const Tensor& out);

// attention() for T > 1 rows (arguments checked by the caller). Rounds Q and the softmax
// weights to the cache's type for the tensor cores (see attention_prefill_kernel.cuh).
Status tensor_core_prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& positions, const AttentionShape& shape, Tensor& out,
                           const ExecutionContext& ctx);

}  // namespace kuiper::op::cuda
