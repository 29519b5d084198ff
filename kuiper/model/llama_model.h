// A LLaMA model (2 or 3: one network, switched by its config) ready to run on one device: its
// layers, its KV cache and its activation buffers, all allocated once at creation.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kuiper/base/device.h"
#include "kuiper/model/checkpoint.h"
#include "kuiper/model/llama_config.h"
#include "kuiper/op/layers.h"

namespace kuiper {

struct ModelOptions {
  DeviceType device = DeviceType::kCPU;
  // Matmul weight dtype; default: as stored on the CPU, bf16 on CUDA.
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
};

class LlamaModel {
 public:
  static StatusOr<std::unique_ptr<LlamaModel>> create(const Checkpoint& checkpoint,
                                                      const ModelOptions& options);
  ~LlamaModel();

  const LlamaConfig& config() const { return config_; }
  DeviceType device() const { return device_; }
  int context() const { return context_; }
  DataType weight_dtype() const { return weight_dtype_; }
  DataType kv_dtype() const { return kv_dtype_; }
  size_t weight_bytes() const;    // bytes of parameters the model reads per token
  size_t kv_cache_bytes() const;  // bytes of the whole KV cache
  Stream stream() const { return stream_; }

  // Runs `tokens` at positions [start_pos, start_pos + tokens.size()): writes their keys and
  // values into the cache and returns the logits of the last one (fp32 [vocab] on the model's
  // device, valid until the next call). Positions must fit in the context.
  StatusOr<Tensor> forward(std::span<const int32_t> tokens, int start_pos);
  // Like forward, but returns the logits of every position (fp32 [n, vocab] on the host).
  StatusOr<Tensor> forward_all(std::span<const int32_t> tokens, int start_pos);

 private:
  struct Layer {
    op::RmsNorm attention_norm, ffn_norm;
    op::MatMul wq, wk, wv, wo, w1, w2, w3;
    // Where fused kernels run, wq|wk|wv and w1|w3 are stored stacked, so that each stack is
    // multiplied in one launch (one long GEMV streams closer to the memory roofline than three
    // short ones, and its epilogue pairs q/k/v or gate/up rows; prefill multiplies q|k|v in
    // one GEMM); wq..w3 are then row views into the stacks.
    op::MatMul wqkv, w13;
    Tensor k_cache, v_cache;  // this layer's slice of the cache, [context, kv_dim]
  };
  // Activation buffers for a batch of rows (views into the full-size buffers).
  struct Activations {
    Tensor tokens, positions;             // int32 [rows]
    Tensor x, xb;                         // [rows, dim]
    Tensor q, attention;                  // [rows, n_heads * head_dim]
    Tensor k, v;                          // [rows, kv_dim]
    Tensor hb, hb2;                       // [rows, hidden_dim]
    // The matmul inputs the norms and swiglu write, in the matmuls' input dtype
    // (KernelTable::matmul_input); views of xb and hb where that is fp32.
    Tensor xn;                            // [rows, dim]
    Tensor hn;                            // [rows, hidden_dim]
    Tensor qkv;                           // [rows, q_dim + 2 kv_dim], fused only
  };

  LlamaModel() = default;
  Status init(const Checkpoint& checkpoint, const ModelOptions& options);
  Status allocate_buffers();
  StatusOr<Activations> activation_rows(int rows) const;
  Status check_positions(size_t count, int start_pos) const;
  // Fails early, with sizes, when the weights, cache and buffers cannot fit on the GPU.
  Status check_device_memory() const;
  // Copies token ids and their positions to the device buffers of `acts`.
  Status upload_inputs(std::span<const int32_t> tokens, int start_pos, const Activations& acts);
  // Embeds and runs all layers over the uploaded rows, leaving the residual stream in acts.x.
  Status run_layers(const Activations& acts);
  // One decode step after upload: layers, final norm and classifier into logits_.
  Status decode_step();
  // The same in five launches per layer: each norm, rope, cache store, swiglu and residual add
  // runs inside a GEMV next to it (kernel_table.h, DecodeGemv).
  Status fused_decode_step();
  // Final norm + classifier of activation rows [first, first + count) into `logits`.
  Status classify(const Activations& acts, int first, int count, Tensor& logits);

  LlamaConfig config_;
  DeviceType device_ = DeviceType::kCPU;
  DataType weight_dtype_ = DataType::kFP32;
  DataType kv_dtype_ = DataType::kFP32;
  int context_ = 0;
  int max_batch_ = 0;
  Allocator* allocator_ = nullptr;
  Stream stream_ = nullptr;

  op::Embedding embedding_;
  std::vector<Layer> layers_;
  op::RmsNorm final_norm_;
  op::MatMul classifier_;
  op::Rope rope_;
  op::Attention attention_;

  Tensor k_cache_, v_cache_;  // [n_layers, context, kv_dim]
  Activations full_;          // max_batch rows
  Activations decode_;        // 1-row views, made once so decoding allocates nothing
  // The device runs the fused kernels (decode_gemv, rope_kv_store) over stacked wq|wk|wv and
  // w1|w3 (kernel_table.h).
  bool fused_ = false;
  DataType matmul_input_dtype_ = DataType::kFP32;  // the table's matmul_input for the weights
  Tensor decode_sumsq_;       // fused decode: sums of squares of x handed to the next norm
  Tensor logits_;             // [vocab]
  std::vector<int32_t> host_staging_;  // tokens then positions, copied to the device per call
  bool use_graph_ = false;
  std::unique_ptr<DeviceGraph> decode_graph_;  // recorded on the second decode step
  int eager_decodes_ = 0;
};

}  // namespace kuiper
