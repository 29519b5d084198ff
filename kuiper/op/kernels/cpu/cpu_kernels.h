// CPU kernels (see kernel_table.h for what each computes). Registered in cpu_kernels.cpp.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cpu {

Status embedding_fp32(const Tensor& tokens, const Weight& table, Tensor& out, Stream);
Status embedding_half(const Tensor& tokens, const Weight& table, Tensor& out, Stream);
Status matmul_fp32(const Tensor& in, const Weight& weight, Tensor& out, Stream);
Status matmul_half(const Tensor& in, const Weight& weight, Tensor& out, Stream);
Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, Stream);
Status add_rmsnorm(Tensor& x, const Tensor& delta, const Tensor& weight, float eps, Tensor& out, Stream);
Status rope(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos, const Tensor& sin,
            int head_dim, Stream);
Status kv_store_fp32(const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& k_cache,
                     Tensor& v_cache, Stream);
Status attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& positions, const AttentionShape& shape, Tensor& out, Stream);
Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, Stream);
Status add(const Tensor& a, const Tensor& b, Tensor& out, Stream);
Status argmax(const Tensor& logits, Tensor& out, Stream);

// Shared argument checks: a kernel's inputs must be on the CPU with the dtype it expects.
Status expect_cpu(const Tensor& t, DataType dtype, const char* what);

}  // namespace kuiper::op::cpu
