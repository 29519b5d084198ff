// The one place where layers meet kernels. Every layer calls its kernel through this table,
// keyed by device and, where the storage type changes the code, by dtype. A backend fills one
// KernelTable (kernels/cpu/cpu_kernels.cpp, kernels/cuda/cuda_kernels.cu); adding a kernel
// means writing the function and naming it in that backend's table, nothing else.
//
// Conventions for every kernel:
//  - all tensors live on the table's device; activations are fp32 and contiguous;
//  - T is the number of positions processed at once (1 for decode, the prompt chunk for prefill);
//  - `positions` is int32 [T] on the device (position of each row), so that a captured CUDA
//    graph stays valid while the position changes;
//  - outputs may alias inputs where a comment says so;
//  - kernels return a Status rather than aborting; a CUDA kernel reports launch errors;
//  - every kernel gets the ExecutionContext it runs in (execution_context.h): it queues work on
//    the context's stream and borrows the context's scratch and backend state, and keeps no
//    state of its own between calls.
#pragma once

#include "kuiper/base/device.h"
#include "kuiper/base/status.h"
#include "kuiper/op/execution_context.h"
#include "kuiper/op/weight.h"
#include "kuiper/tensor/tensor.h"

namespace kuiper::op {

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;  // divides n_heads
  int head_dim = 0;
  constexpr int group() const { return n_heads / n_kv_heads; }  // query heads that share one KV head
};

// out[t, :] = table[tokens[t], :] (dequantized when the table is int8 or int4). tokens: int32 [T].
using EmbeddingKernel = Status (*)(const Tensor& tokens, const Weight& table, Tensor& out,
                                   const ExecutionContext& ctx);

// out[T, rows] = in[T, cols] · weightᵀ. The decode case (T = 1) is a GEMV. in is fp32, or the
// table's matmul_input dtype for the weight dtype.
using MatmulKernel = Status (*)(const Tensor& in, const Weight& weight, Tensor& out,
                                const ExecutionContext& ctx);

// out[t] = in[t] / sqrt(mean(in[t]²) + eps) * weight. out may alias in. out is fp32, or (CUDA)
// fp16/bf16, rounded from the fp32 result.
using RmsNormKernel = Status (*)(const Tensor& in, const Tensor& weight, float eps, Tensor& out,
                                 const ExecutionContext& ctx);

// x += delta, then out = rmsnorm(x) * weight: a residual add fused into the norm that follows
// it (one pass over x instead of two launches). out may alias delta; its dtype as for RmsNorm.
using AddRmsNormKernel = Status (*)(Tensor& x, const Tensor& delta, const Tensor& weight, float eps,
                                    Tensor& out, const ExecutionContext& ctx);

// Rotates q [T, n_heads*head_dim] and k [T, n_kv_heads*head_dim] in place. Pairs are
// interleaved (x[2i], x[2i+1]) as in Meta's and llama2.c's code (HF checkpoints are permuted
// into this form at load). cos/sin: fp32 [max_positions, head_dim/2], precomputed by the model
// (this is where θ and LLaMA 3 frequency scaling live).
using RopeKernel = Status (*)(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos,
                              const Tensor& sin, int head_dim, const ExecutionContext& ctx);

// Writes k, v [T, kv_dim] into row rows[t] of the caches [slots, kv_dim], converting to the
// caches' dtype. rows is int32 [T]: the positions for a contiguous cache, the slots for a paged
// one (PagedKv).
using KvStoreKernel = Status (*)(const Tensor& k, const Tensor& v, const Tensor& rows,
                                 Tensor& k_cache, Tensor& v_cache, const ExecutionContext& ctx);

// Causal attention: query row t (q: [T, n_heads*head_dim]) attends to cache rows
// 0..positions[t] inclusive; out: [T, n_heads*head_dim]. Scores are scaled by 1/sqrt(head_dim).
// out is fp32, or (CUDA) fp16/bf16, rounded from the fp32 result: the dtype the matmul after
// attention reads (matmul_input below), so that it needs no rounding pass of its own.
using AttentionKernel = Status (*)(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   const Tensor& positions, const AttentionShape& shape,
                                   Tensor& out, const ExecutionContext& ctx);

// Optional: attention of one query row over a contiguous cache (decode) that writes its output
// out [1, n_heads*head_dim] in fp32 and quantized as well, into out_quantized (int8
// [decode_quantized_x_bytes(n_heads*head_dim)], below), for an int8 or int4 wo to read
// (DecodeGemv::in_quantized). head_dim must be a multiple of kDecodeQuantizedBlock. Otherwise as
// AttentionKernel.
using AttentionQuantizedOutputKernel = Status (*)(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                                  const Tensor& positions, const AttentionShape& shape, Tensor& out,
                                                  Tensor& out_quantized, const ExecutionContext& ctx);

// A paged KV cache: the caches are a pool of slots [blocks * block_size, kv_dim]; sequence s
// keeps position p in slot block_tables[s, p / block_size] * block_size + p % block_size.
struct PagedKv {
  const Tensor* block_tables = nullptr;  // int32 [sequences, table_width]
  const Tensor* row_sequence = nullptr;  // int32 [T]: the sequence (row of block_tables) of each row
  int block_size = 0;
};

// Causal attention of rows of several sequences: query row t attends to positions
// 0..positions[t] of its own sequence, read through the block table (PagedKv). Otherwise as
// AttentionKernel. A row's result does not depend on the other rows' data (batch invariance);
// how many rows there are and how far their tables reach may change how a backend splits the
// work, and so the rounding (CUDA: paged_attention.cu).
using PagedAttentionKernel = Status (*)(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                        const Tensor& positions, const PagedKv& paged,
                                        const AttentionShape& shape, Tensor& out, const ExecutionContext& ctx);

// out = silu(gate) * up, elementwise. out may alias gate; its dtype as for RmsNorm.
using SwigluKernel = Status (*)(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext& ctx);

// x[t, :] += bias for every row t of x [T, n]; bias fp32 [n] (projection biases: Qwen2's q/k/v,
// LLaMA's attention_bias and mlp_bias).
using AddBiasKernel = Status (*)(Tensor& x, const Tensor& bias, const ExecutionContext& ctx);

// out = a + b, elementwise. out may alias a.
using AddKernel = Status (*)(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext& ctx);

// out[r] = index of the largest element of row r of logits (fp32 [rows, n], or [n]: one row),
// first one on ties; -1 when any element of the row is NaN or infinite (a damaged model), so that
// greedy decoding never picks a token from such logits. out: int32 [rows]. A batch of greedy
// sequences then copies one id per sequence to the host instead of its whole vocabulary.
using ArgmaxKernel = Status (*)(const Tensor& logits, Tensor& out, const ExecutionContext& ctx);

// A decode-time GEMV (one token) with the work around it fused in, so that a transformer layer
// costs a few launches instead of a dozen (each launch costs the GPU several microseconds of
// idle memory bus at batch 1). y = W · in, then the epilogue decides where y goes:
enum class GemvEpilogue {
  kStore,       // out[rows] = y
  kAccumulate,  // out[rows] += y: the residual connection
  kSwiglu,      // W stacks gate rows over as many up rows: out[rows/2] = silu(gate) * up
  kRopeKv,      // W stacks q, k, v rows (q_rows, then two equal halves): out[q_rows] = rope(q);
                // rope(k) and v go to row positions[0] of the caches, in the caches' dtype
};

// RMSNorm is handed from one decode GEMV to the next: a kAccumulate GEMV given
// next_norm_weight g also writes out · g and the sums of squares of out over runs of this many
// rows; the GEMV that reads them scales its y by 1 / rms(out). A norm then costs neither a
// launch nor a second pass over the vector.
inline constexpr int kDecodeSumsqRun = 8;
// How many runs of kDecodeSumsqRun a vector of n elements hands on (the last may be short).
inline constexpr int64_t decode_sumsq_runs(int64_t n) { return (n + kDecodeSumsqRun - 1) / kDecodeSumsqRun; }

// x handed from one decode kernel to the next GEMV already quantized: the kernel that writes x
// (a kAccumulate's x · g, a kSwiglu's output, decode attention's output) can also write it as
// int8 in halves of 16 values, each half with its scale max|x| / 127 and the sum of its int8
// values; the next GEMV, where it multiplies in integers, reads those instead of quantizing all
// of x again in every block. x is laid out in blocks of kDecodeQuantizedBlock values: n values
// (n a multiple of it) take this many bytes, per block 32 int8 values and two 8-byte halves.
inline constexpr int kDecodeQuantizedBlock = 32;
inline constexpr int64_t decode_quantized_x_bytes(int64_t n) { return n / kDecodeQuantizedBlock * 48; }

// Where stacked q/k/v rows go: q rotated into its output, k rotated and v stored in the caches.
struct RopeKvTarget {
  const Tensor* positions = nullptr;  // int32, one per row of tokens
  const Tensor* cos = nullptr;        // fp32 [max_positions, head_dim / 2], as for RopeKernel
  const Tensor* sin = nullptr;
  int head_dim = 0;
  int q_rows = 0;
  Tensor* k_cache = nullptr;  // [context, kv_rows]
  Tensor* v_cache = nullptr;
  const Tensor* slots = nullptr;  // int32, the cache row of each token; null: its position
};

struct DecodeGemv {
  const Tensor* in = nullptr;  // fp32, cols elements
  const Weight* weight = nullptr;
  // An input norm, in one of two forms (neither: no norm); either way y = W · (x · g) scaled by
  // 1 / sqrt(mean(x²) + norm_eps).
  //  - in_sumsq: `in` holds x · g and in_sumsq the sums of squares of x over runs (fp32
  //    [decode_sumsq_runs(cols)]), as a kAccumulate GEMV hands them on.
  //  - in_norm_weight: `in` holds x itself and in_norm_weight g (fp32 [cols]), for an x that no
  //    GEMV wrote last (the embedding; tensor parallelism's sums). Where each block reads all
  //    of x (one pass over its rows, or x quantized to int8 for integer products) the GEMV sums
  //    the squares as it reads; elsewhere it normalizes x into scratch first
  //    (ScratchUse::kNormedInput).
  const Tensor* in_sumsq = nullptr;
  const Tensor* in_norm_weight = nullptr;
  float norm_eps = 0.f;
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  Tensor* out = nullptr;  // fp32
  // kAccumulate only, optional: next_normed = out · next_norm_weight (after the add) and
  // next_sumsq (fp32 [decode_sumsq_runs(rows)]) its sums of squares, as above.
  const Tensor* next_norm_weight = nullptr;
  Tensor* next_normed = nullptr;
  Tensor* next_sumsq = nullptr;
  RopeKvTarget rope_kv;  // kRopeKv only
  // Optional, x quantized (int8 [decode_quantized_x_bytes(cols)]) by the GEMV that wrote it, as
  // its out_quantized; read where decode_gemv_reads_quantized says so. `in` (and in_sumsq) still
  // hold x: no in_norm_weight with it.
  const Tensor* in_quantized = nullptr;
  // Optional, where decode_gemv_quantizes_output says so: the output quantized as well (int8
  // [decode_quantized_x_bytes(n)]): kAccumulate's next_normed, kSwiglu's out.
  Tensor* out_quantized = nullptr;
};
using DecodeGemvKernel = Status (*)(const DecodeGemv& gemv, const ExecutionContext& ctx);
// Whether decode_gemv over `weight` reads DecodeGemv::in_quantized, and whether it can write
// out_quantized with `epilogue`: a model hands x on quantized only where both hold.
using DecodeGemvReadsQuantized = bool (*)(const Weight& weight);
using DecodeGemvQuantizesOutput = bool (*)(const Weight& weight, GemvEpilogue epilogue);

// The prefill form of kRopeKv: qkv [T, q_rows + 2 kv_rows] is the stacked GEMM's output; q
// [T, q_rows] receives the rotated q rows; k and v go to row slots[t] (or positions[t]) of the
// caches.
// Positions outside the rope tables or the cache are treated as by RopeKernel and KvStoreKernel.
using RopeKvStoreKernel = Status (*)(const Tensor& qkv, const RopeKvTarget& target, Tensor& q,
                                     const ExecutionContext& ctx);

// The batched form of kSwiglu: gate_up [T, 2n] is the stacked gate|up GEMM's output (each row n
// gate values, then n up values); out [T, n] = silu(gate) * up, its dtype as for RmsNorm.
using SwigluStackedKernel = Status (*)(const Tensor& gate_up, Tensor& out, const ExecutionContext& ctx);

struct KernelTable {
  EmbeddingKernel embedding[kNumDataTypes] = {};  // by table dtype
  MatmulKernel matmul[kNumDataTypes] = {};        // by weight dtype
  // By weight dtype, the input dtype its matmul reads without a conversion pass; the model has
  // the norms and swiglu write the matmul inputs in it. CUDA's fp16/bf16 GEMMs round their
  // fp32 input to the weight's type first: a pass the producer can do while it writes.
  DataType matmul_input[kNumDataTypes] = {};      // kFP32 where unset
  RmsNormKernel rmsnorm = nullptr;
  AddRmsNormKernel add_rmsnorm = nullptr;
  RopeKernel rope = nullptr;
  KvStoreKernel kv_store[kNumDataTypes] = {};     // by cache dtype
  AttentionKernel attention[kNumDataTypes] = {};  // by cache dtype
  PagedAttentionKernel paged_attention[kNumDataTypes] = {};  // by cache dtype
  SwigluKernel swiglu = nullptr;
  AddKernel add = nullptr;
  AddBiasKernel add_bias = nullptr;
  ArgmaxKernel argmax = nullptr;
  // Optional, for stacked q/k/v and gate/up weights: where decode_gemv is null for the weight
  // dtype, or either of the other two is, the model runs the unfused kernels above.
  DecodeGemvKernel decode_gemv[kNumDataTypes] = {};
  DecodeGemvReadsQuantized decode_gemv_reads_quantized = nullptr;    // null: never
  DecodeGemvQuantizesOutput decode_gemv_quantizes_output = nullptr;  // null: never
  AttentionQuantizedOutputKernel attention_quantized_output[kNumDataTypes] = {};  // by cache dtype
  RopeKvStoreKernel rope_kv_store = nullptr;
  SwigluStackedKernel swiglu_stacked = nullptr;
};

// The table of `device`. For a device this build lacks, every entry is null.
const KernelTable& kernel_table(DeviceType device);

// Each backend defines its table; the CUDA one is empty in builds without CUDA.
const KernelTable& cpu_kernel_table();
const KernelTable& cuda_kernel_table();

// Picks an entry, or says which kernel is missing: `KUIPER_ASSIGN_OR_RETURN(auto fn,
// pick_kernel(table.matmul[i], "matmul", device, dtype))`.
template <typename Fn>
StatusOr<Fn> pick_kernel(Fn fn, const char* name, DeviceType device,
                         DataType dtype = DataType::kFP32) {
  if (fn == nullptr) {
    return unsupported(std::string("no ") + std::string(device_name(device)) + " kernel for " +
                       name + " with " + std::string(dtype_name(dtype)) + " data");
  }
  return fn;
}

}  // namespace kuiper::op
