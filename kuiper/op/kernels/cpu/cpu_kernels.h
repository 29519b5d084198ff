// CPU kernels (see kernel_table.h for what each computes). Registered in cpu_kernels.cpp.
#pragma once

#include <span>

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cpu {

Status embedding_fp32(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&);
Status embedding_half(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&);
Status matmul_fp32(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&);
Status matmul_half(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext&);
Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, const ExecutionContext&);
Status add_rmsnorm(Tensor& x, const Tensor& delta, const Tensor& weight, float eps, Tensor& out, const ExecutionContext&);
Status rope(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos, const Tensor& sin,
            int head_dim, const ExecutionContext&);
Status kv_store_fp32(const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& k_cache,
                     Tensor& v_cache, const ExecutionContext&);
Status attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& positions, const AttentionShape& shape, Tensor& out, const ExecutionContext&);
Status paged_attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                            const PagedKv& paged, const AttentionShape& shape, Tensor& out,
                            const ExecutionContext& ctx);
Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext&);
Status add(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext&);
Status add_bias(Tensor& x, const Tensor& bias, const ExecutionContext&);
Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext&);
// One row of argmax: the first index of the largest value, -1 when any value is NaN or Inf.
int32_t finite_argmax(std::span<const float> values);

// Shared argument checks: a kernel's inputs must be on the CPU with the dtype it expects.
Status expect_cpu(const Tensor& t, DataType dtype, const char* what);
// An embedding lookup's tokens and output against the table's shape, and every token id
// against the table's rows: an id outside the table is a caller error, not a crash.
Status check_embedding(const Tensor& tokens, const Weight& table, const Tensor& out);

}  // namespace kuiper::op::cpu
