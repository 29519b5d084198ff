// CUDA kernels (see kernel_table.h for what each computes). Registered in cuda_kernels.cu.
// Wrappers never synchronise, allocate from the driver on the decode path, or read device data
// on the host, so that a decode step can be captured in a CUDA graph. Consequently positions
// and token ids are not range-checked on the host: kernels skip out-of-range positions and
// write zeros for out-of-range token ids, as documented at each kernel.
#pragma once

#include "kuiper/op/kernel_table.h"

namespace kuiper::op::cuda {

Status embedding(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx);
Status matmul(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx);
Status rmsnorm(const Tensor& in, const Tensor& weight, float eps, Tensor& out, const ExecutionContext& ctx);
Status add_rmsnorm(Tensor& x, const Tensor& delta, const Tensor& weight, float eps, Tensor& out,
                   const ExecutionContext& ctx);
Status rope(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos, const Tensor& sin,
            int head_dim, const ExecutionContext& ctx);
Status kv_store(const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& k_cache,
                Tensor& v_cache, const ExecutionContext& ctx);
Status attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const Tensor& positions, const AttentionShape& shape, Tensor& out,
                 const ExecutionContext& ctx);
Status attention_quantized_output(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const Tensor& positions, const AttentionShape& shape, Tensor& out,
                                  Tensor& out_quantized, const ExecutionContext& ctx);
Status paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                       const PagedKv& paged, const AttentionShape& shape, Tensor& out, const ExecutionContext& ctx);
Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext& ctx);
Status swiglu_stacked(const Tensor& gate_up, Tensor& out, const ExecutionContext& ctx);
Status add(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext& ctx);
Status add_bias(Tensor& x, const Tensor& bias, const ExecutionContext& ctx);
Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext& ctx);
// Any weight dtype, int8 and int4 included.
Status decode_gemv(const DecodeGemv& gemv, const ExecutionContext& ctx);
bool decode_gemv_reads_quantized(const Weight& weight);
bool decode_gemv_quantizes_output(const Weight& weight, GemvEpilogue epilogue);
Status rope_kv_store(const Tensor& qkv, const RopeKvTarget& target, Tensor& q, const ExecutionContext& ctx);

// Shared argument check: `t` must be a non-empty CUDA tensor of `dtype`.
Status expect_cuda(const Tensor& t, DataType dtype, const char* what);
// Like expect_cuda, for tensors whose dtype the kernel dispatches on (fp32, fp16 or bf16).
Status expect_cuda_float_type(const Tensor& t, const char* what);
// The checks every attention entry makes (attention_cuda.cu, paged_attention.cu): q fp32,
// caches of one float type, int32 positions and a float output, all on CUDA, in shapes that fit.
Status expect_cuda_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                             const AttentionShape& shape, const Tensor& out);

}  // namespace kuiper::op::cuda
