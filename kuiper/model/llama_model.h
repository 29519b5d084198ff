// A LLaMA model (2 or 3: one network, switched by its config) ready to run on one device: its
// layers, its KV cache, its activation buffers and the execution context its kernels run in,
// all allocated once at creation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kuiper/base/device.h"
#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_weights.h"
#include "kuiper/model/parallel_plan.h"
#include "kuiper/op/execution_context.h"
#include "kuiper/op/layers.h"

namespace kuiper {

// The inputs a layer's matrix products multiply, as calibration sees them (ModelOptions).
enum class MatrixInput {
  kAttention,          // wq, wk, wv: the attention norm's output
  kAttentionOutput,    // wo: the attention's output
  kFeedForward,        // w1, w3: the feed-forward norm's output
  kFeedForwardHidden,  // w2: silu(w1 x) · w3 x
  kClassifier,         // the classifier: the final norm's output (layer = n_layers)
};
// Called with one layer's rows of one MatrixInput (fp32 [rows, width] on the host, valid during
// the call); an error stops the forward pass.
using MatrixInputObserver = std::function<Status(int layer, MatrixInput input, const Tensor& rows)>;

struct ModelOptions {
  DeviceType device = DeviceType::kCPU;
  // Matmul weight dtype. Unset: every matrix runs as stored, on the kernels of its own type (a
  // GGUF Q4_K_M file mixes Q4_K and Q6_K matrices, int4 and int8; a Q4_0 one may keep F16
  // matrices whose rows are not whole blocks), except that CUDA runs fp32 ones in bf16; and
  // weight_dtype() reports wq's. Set: every matrix is converted to it, except that under int8 or
  // int4 a matrix stored in int8 or int4 keeps its own type and groups. Either way the stacks the
  // fused CUDA decode runs (q|k|v, gate|up) take one quantization: parts stored otherwise are
  // requantized like the first.
  std::optional<DataType> weight_dtype;
  // Positions the KV cache holds; 0 = the model's max_seq_len, capped at kDefaultContext so that
  // a model trained for 128K positions does not take gigabytes of cache unasked.
  int context = 0;
  static constexpr int kDefaultContext = 4096;
  // Largest number of positions one forward pass processes; longer prompts run in chunks
  // (512 keeps the GPU's matrix products on their efficient plateau).
  int max_batch = 512;
  // On CUDA, record the decode step once as a CUDA graph and replay it for every token.
  bool use_cuda_graph = true;
  // Rows of the KV cache per layer; 0 = the context. A paged cache (kv_block_size > 0) is a pool
  // of kv_slots / kv_block_size blocks shared by the sequences of forward_step.
  int kv_slots = 0;
  int kv_block_size = 0;   // positions per block of a paged cache; 0 = forward() only
  int max_sequences = 1;   // sequences one forward_step may carry
  // Ranks the model is split over (model/parallel_plan.h): GPUs 0..n-1 on CUDA, threads of
  // this process on the CPU.
  int tensor_parallel = 1;
  // Calibration (calibration_inputs.h): sees what the matrix products of every pass that is not
  // a fused decode step multiply (forward_all, prompts). CPU on one rank only.
  MatrixInputObserver observe_inputs;
};

// Rows of several sequences for one forward pass (kernel_table.h, PagedKv): row i is token
// tokens[i] of sequence row_sequence[i] at positions[i], its keys and values going to cache
// row slots[i]; sequence s keeps position p in slot block_tables[s * table_width + p / block]
// * block + p % block, where block is the model's kv_block_size.
struct StepBatch {
  std::span<const int32_t> tokens, positions, slots, row_sequence;
  std::span<const int32_t> block_tables;  // [sequences, table_width], row-major
  int table_width = 0;
  std::span<const int32_t> logit_rows;    // rows whose logits are wanted, at most max_sequences
};

class LlamaModel {
 public:
  // Places `weights` (host tensors, e.g. a loaded checkpoint's) on the device in the chosen
  // dtype; the model keeps no reference to them afterwards unless they are used in place
  // (fp32 weights on the CPU stay views of the mapped file). With options.tensor_parallel > 1
  // the returned model is rank 0 of a group: it holds the other ranks and answers for all of
  // them, each call running on every rank at once.
  static StatusOr<std::unique_ptr<LlamaModel>> create(const LlamaConfig& config, const LlamaWeights& weights,
                                                      const ModelOptions& options);
  ~LlamaModel();

  const LlamaConfig& config() const { return whole_config_; }
  DeviceType device() const { return device_; }
  int context() const { return context_; }
  DataType weight_dtype() const { return weight_dtype_; }
  DataType kv_dtype() const { return kv_dtype_; }
  int ranks() const { return plan_.ranks; }
  // What runs the ranks' collectives (parallel/communicator.h); empty on one rank.
  std::string collectives() const { return plan_.comm == nullptr ? std::string() : plan_.comm->description(); }
  size_t weight_bytes() const;  // bytes of parameters the model (all its ranks) reads per token
  // Where the model's kernels run (rank 0's GPU); work for the tensors the model returns goes
  // on its stream.
  const op::ExecutionContext& execution_context() const { return *ctx_; }
  Stream stream() const { return ctx_->stream(); }

  // Runs `tokens` at positions [start_pos, start_pos + tokens.size()): writes their keys and
  // values into the cache and returns the logits of the last one (fp32 [vocab] on the model's
  // device, valid until the next call). Positions must fit in the context.
  StatusOr<Tensor> forward(std::span<const int32_t> tokens, int start_pos);
  // Like forward, but returns the logits of every position (fp32 [n, vocab] on the host).
  StatusOr<Tensor> forward_all(std::span<const int32_t> tokens, int start_pos);
  // Runs the rows of several sequences over the paged cache and returns the logits of
  // batch.logit_rows (fp32 [logit_rows, vocab] on the model's device, valid until the next call).
  // A row's result does not depend on the other rows' data (on CUDA their number can change the
  // rounding: kernel_table.h, PagedAttentionKernel). One sequence whose blocks
  // are 0, 1, 2, ... is a contiguous cache: it takes forward()'s path (on CUDA the fused decode
  // GEMVs and the CUDA graph).
  StatusOr<Tensor> forward_step(const StepBatch& batch);
  int kv_slots() const { return kv_slots_; }
  int kv_block_size() const { return kv_block_size_; }
  int max_sequences() const { return max_sequences_; }

 private:
  struct Layer {
    op::RmsNorm attention_norm, ffn_norm;
    op::MatMul wq, wk, wv, wo, w1, w2, w3;
    // Where the device has the fused kernels, wq|wk|wv and w1|w3 are stored stacked, so that
    // each stack is multiplied in one launch (one long GEMV streams closer to the memory
    // roofline than three short ones, and its epilogue pairs q/k/v or gate/up rows; prefill
    // multiplies q|k|v in one GEMM); wq..w3 are then row views into the stacks.
    op::MatMul wqkv, w13;
    // The family's extras (llama_config.h), on the device in fp32; empty where absent.
    Tensor bq, bk, bv, bo, b1, b2, b3;
    op::RmsNorm q_norm, k_norm;  // over each head of q and of k
    Tensor k_cache, v_cache;  // this layer's slice of the cache, [kv_slots, kv_dim]
    // Its first `context` rows: the cache of a sequence whose slots are its positions, so that
    // the contiguous kernels (split-cache decode attention) size their work by the context, not
    // by the whole pool.
    Tensor k_positions, v_positions;
  };
  // Activation buffers for a batch of rows (views into the full-size buffers). "Matmul input
  // dtype" is the kernel table's matmul_input for the weights: fp32, or (CUDA) the weights' own
  // 16-bit type, so that the kernel writing a matmul's input rounds it on the way.
  struct Activations {
    Tensor tokens, positions;  // int32 [rows]
    Tensor slots;              // int32 [rows]: the cache row of each token (its position when contiguous)
    Tensor row_sequence;       // int32 [rows]: each row's sequence (paged only)
    const op::PagedKv* paged = nullptr;  // the block tables; null: a contiguous cache
    int64_t reach = 0;         // contiguous cache: the rows attention reads (0: all of them)
    Tensor x;                  // [rows, dim] the residual stream
    Tensor normed;             // [rows, dim] a norm's output, in the matmul input dtype
    Tensor qkv;                // [rows, q_dim + 2 kv_dim] stacked q|k|v projections (stacked only)
    Tensor q;                  // [rows, q_dim] rotated queries
    Tensor k, v;               // [rows, kv_dim] this step's keys and values (unstacked only)
    Tensor attention;          // [rows, q_dim] attention output, in the matmul input dtype
    Tensor attention_fp32;     // [1, q_dim] attention output in fp32, as a fused GEMV reads it
    Tensor delta;              // [rows, dim] a sublayer's output before it joins the residual
    Tensor gate_up;            // [rows, 2 hidden_dim] stacked gate|up projections (stacked only)
    Tensor gate, up;           // [rows, hidden_dim] the feed-forward projections (unstacked only)
    Tensor hidden;             // [rows, hidden_dim] silu(gate) * up, in the matmul input dtype
    Tensor swiglu;             // [rows, hidden_dim] silu(gate) * up in fp32, as a fused GEMV writes it
  };
  // How a norm reaches the next fused decode GEMV (kernel_table.h, DecodeGemv).
  struct NormHandoff {
    enum class Form {
      kScaled,  // the GEMV that wrote x left `values` = x · g and `sumsq`, the sums of squares of x
      kRaw,     // no GEMV wrote x last (the embedding, or the ranks' sum): the next GEMV
                // normalizes x as it reads it
    } form = Form::kRaw;
    Tensor values;  // fp32 [dim]
    Tensor sumsq;   // fp32 [decode_sumsq_runs(dim)]
    // kScaled, where `quantized_written`: `values` quantized as well, by the GEMV that wrote them
    // (op/kernel_table.h, DecodeGemv::out_quantized), for the next GEMV to read so.
    Tensor quantized;  // int8 [decode_quantized_x_bytes(dim)]
    bool quantized_written = false;
  };
  // Which fused decode kernels of a layer hand their output on quantized (each where it can and
  // the GEMV reading that output reads it so): attention to wo, wo to w1|w3, w1|w3 to w2, w2 to
  // the next layer's wq|wk|wv (or the classifier). Under tensor parallelism only the first and
  // third: wo and w2 write partial sums.
  struct QuantizedHandoffs {
    bool attention = false, wo = false, w13 = false, w2 = false;
  };

  // The other ranks of a tensor-parallel group, held by rank 0 (llama_model.cpp).
  struct RankGroup;

  LlamaModel();
  // One rank's model: `config` is the whole network's, `weights` the rank's (plan.rank_weights).
  static StatusOr<std::unique_ptr<LlamaModel>> create_rank(const LlamaConfig& config, const LlamaWeights& weights,
                                                           const ModelOptions& options, const ParallelPlan& plan);
  // Runs `step` on every rank at once (on this model alone without a group) and returns this
  // rank's result. Inputs are checked before: a rank that failed alone would leave the others
  // waiting in a collective.
  template <typename Step>
  StatusOr<Tensor> on_every_rank(const Step& step);
  StatusOr<Tensor> forward_rank(std::span<const int32_t> tokens, int start_pos);
  StatusOr<Tensor> forward_all_rank(std::span<const int32_t> tokens, int start_pos);
  StatusOr<Tensor> forward_step_rank(const StepBatch& batch);
  size_t rank_weight_bytes() const;
  Status init(const LlamaConfig& config, const LlamaWeights& weights, const ModelOptions& options);
  Status place_weights(const LlamaWeights& weights);
  Status allocate_buffers();
  op::ScratchPlan scratch_plan() const;
  StatusOr<Activations> activation_rows(int rows) const;
  Status check_positions(size_t count, int start_pos) const;
  // Fails early, with sizes, when the weights, cache and buffers cannot fit on the GPU.
  Status check_device_memory() const;
  // Copies token ids and their positions to the device buffers of `acts`.
  Status upload_inputs(std::span<const int32_t> tokens, int start_pos, Activations& acts);
  Status check_step(const StepBatch& batch) const;
  // Whether `batch` is one sequence in blocks 0, 1, 2, ...: slot == position.
  bool is_contiguous(const StepBatch& batch) const;
  // Whether `batch` is one decode row per sequence, each returning its logits: then the step's
  // kernels depend only on the row count, once the block tables are laid out at their full
  // width, and the step is recorded once per row count and replayed, as the one-sequence decode
  // step is (launched one by one, its ~400 kernels leave the GPU idle between them).
  bool is_decode_rows(const StepBatch& batch) const;
  // Copies the step's inputs to the device; `full_width`: block tables max_table_width_ wide.
  Status upload_step(const StepBatch& batch, Activations& acts, bool full_width);
  // The step's network and classifier after upload_step: `wanted` rows' logits into `logits`.
  Status run_step(const StepBatch& batch, Activations& acts, Tensor& logits);

  // The network, written once. `fused`: this is a decode step and the device's table has the
  // decode GEMV for the weights, so each norm, rope, cache store, swiglu and residual add runs
  // inside the GEMV next to it; otherwise each runs as its own kernel (kernel_table.h).
  // Embeds the rows and runs every layer; leaves the final norm's input ready for classify.
  Status run_network(Activations& a, bool fused);
  Status run_layer(Layer& layer, const op::RmsNorm& next_norm, Activations& a, bool fused);
  // Hands `rows` to options.observe_inputs, when set and the pass is not a fused decode step.
  Status observe(int layer, MatrixInput input, const Tensor& rows, bool fused) const;
  // The layer's cache as the rows `a` address it: the pool when paged, else its first rows.
  static Tensor& keys(Layer& layer, const Activations& a) { return a.paged ? layer.k_cache : layer.k_positions; }
  static Tensor& values(Layer& layer, const Activations& a) { return a.paged ? layer.v_cache : layer.v_positions; }
  // normed input → q (rotated) and this step's k, v in the layer's cache.
  Status project_qkv(Layer& layer, Activations& a, bool fused);
  // x += W · in, and the norm `next` of the new x made ready for the projections after it.
  // Fused, `in_quantized` is `in` handed on quantized (or null), and `hand_on_quantized` says
  // whether the next norm's input goes on quantized too (QuantizedHandoffs).
  Status add_to_residual(const op::MatMul& w, const Tensor& bias, const Tensor& in, const op::RmsNorm& next,
                         Activations& a, bool fused, const Tensor* in_quantized = nullptr,
                         bool hand_on_quantized = false);
  // RMSNorm of each head_dim-wide head of x [rows, heads * head_dim], in place.
  Status norm_heads(const op::RmsNorm& norm, Tensor& x);
  // normed input → silu(gate) * up, in `hidden` (or fp32 `swiglu` when fused; and where
  // `out_quantized` is not null, quantized there as well for w2, QuantizedHandoffs).
  Status feed_forward(Layer& layer, Activations& a, bool fused, Tensor* out_quantized);
  // quantized_handoffs_, from what the kernel table says each GEMV can write and read.
  Status plan_quantized_handoffs();
  // A fused decode GEMV reading x [1, dim] through `norm`, in the handoff's form.
  op::DecodeGemv normed_gemv(const Tensor& x, const op::RmsNorm& norm, op::GemvEpilogue epilogue, Tensor& out) const;
  // The final norm's output of rows [first, first + count) → logits.
  Status classify(Activations& a, int first, int count, Tensor& logits, bool fused);
  // Logits [rows, vocab] of the normed rows `input` [rows, dim] (fused: of one row of x, through
  // the handed-on final norm).
  Status classify_rows(const Tensor& input, int64_t rows, Tensor& logits, bool fused);
  // This rank's columns of the logits, `mine` [rows, vocab / ranks], gathered from every rank
  // into `logits` [rows, vocab], through `staging` (ranks · rows · vocab / ranks) when rows > 1.
  Status gather_logits(const Tensor& mine, Tensor& logits, Tensor& staging);
  // One decode step after upload: the network and the classifier into logits_.
  Status decode_step();

  LlamaConfig whole_config_;  // the network
  LlamaConfig config_;        // this rank's share of it (ParallelPlan::rank_config)
  ParallelPlan plan_;
  std::unique_ptr<RankGroup> group_;  // rank 0 of several only
  DeviceType device_ = DeviceType::kCPU;
  DataType weight_dtype_ = DataType::kFP32;
  DataType kv_dtype_ = DataType::kFP32;
  int context_ = 0;
  int max_batch_ = 0;
  int multiprocessors_ = 0;  // of the GPU (CUDA only): sizes the paged attention's scratch
  std::unique_ptr<op::ExecutionContext> ctx_;

  op::Embedding embedding_;
  std::vector<Layer> layers_;
  op::RmsNorm final_norm_;
  op::MatMul classifier_;
  op::Rope rope_;
  op::Attention attention_;

  int kv_slots_ = 0;
  int kv_block_size_ = 0;
  int max_sequences_ = 1;
  Tensor k_cache_, v_cache_;  // [n_layers, kv_slots, kv_dim]
  // forward_step: the block tables [max_sequences, table width], the normed rows whose logits
  // are wanted (gathered), and their logits.
  int max_table_width_ = 0;  // blocks of a sequence that fills the context
  Tensor block_tables_;      // int32 [max_sequences * max_table_width], flat
  Tensor step_tables_;       // this step's [sequences, table width] view of block_tables_
  op::PagedKv paged_;
  Tensor picked_normed_, step_logits_;
  Activations full_;          // max_batch rows
  Activations decode_;        // 1-row views, made once so decoding allocates nothing
  // The device runs the fused kernels (decode_gemv, rope_kv_store) over stacked wq|wk|wv and
  // w1|w3 (kernel_table.h).
  bool fused_ = false;
  MatrixInputObserver observe_inputs_;
  bool matrices_as_stored_ = false;  // ModelOptions::weight_dtype unset
  DataType matmul_input_dtype_ = DataType::kFP32;  // the table's matmul_input for the weights
  NormHandoff handoff_;       // fused decode only
  std::vector<QuantizedHandoffs> quantized_handoffs_;  // by layer; all off unless fused
  Tensor swiglu_quantized_;   // w1|w3's output quantized for w2, where quantized_handoffs_ say
  Tensor attention_quantized_;  // attention's output quantized for wo, where quantized_handoffs_ say
  Tensor logits_;             // [vocab]
  // A split vocabulary: this rank's logits [max_sequences, vocab / ranks] and the gathered
  // [ranks, max_sequences, vocab / ranks] before they are put in row order.
  Tensor rank_logits_, gathered_logits_;
  std::vector<int32_t> host_staging_;  // tokens then positions, copied to the device per call
  bool use_graph_ = false;
  // One-sequence decode steps, recorded on the first step of each reach (op::decode_attention_reach).
  std::map<int64_t, std::unique_ptr<DeviceGraph>> decode_graphs_;
  std::map<int, std::unique_ptr<DeviceGraph>> decode_rows_graphs_;  // by row count (is_decode_rows)
  // A row count is recorded only once it has run kSteadySteps decode steps in a row: while a
  // server's batch grows or shrinks every step, recording each passing size would stall it.
  static constexpr int kSteadySteps = 4;
  int last_decode_rows_ = 0, decode_rows_streak_ = 0;
  std::vector<int32_t> wide_tables_;  // host staging for block tables at their full width
};

}  // namespace kuiper
