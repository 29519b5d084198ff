// The shape of a LLaMA-family model. LLaMA 2 and 3, Mistral, Qwen2/2.5 and Qwen3 are one network;
// they differ only in these numbers and switches (GQA head counts, RoPE θ and scaling,
// vocabulary, tied classifier, projection biases, per-head q/k norms, a sliding window).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

// LLaMA 3.1/3.2 frequency scaling ("rope_type": "llama3" in HF config.json).
struct RopeScaling {
  bool enabled = false;
  float factor = 8.f;
  float low_freq_factor = 1.f;
  float high_freq_factor = 4.f;
  int original_max_positions = 8192;
};

struct LlamaConfig {
  int dim = 0;          // model width
  int hidden_dim = 0;   // feed-forward width
  int n_layers = 0;
  int n_heads = 0;      // query heads
  int n_kv_heads = 0;   // key/value heads (divides n_heads)
  int vocab_size = 0;
  int max_seq_len = 0;  // longest context the model was trained for
  float rope_theta = 10000.f;
  RopeScaling rope_scaling;
  float norm_eps = 1e-5f;
  bool shared_classifier = true;  // classifier reuses the token embedding
  int head_size = 0;       // width of one head where it is not dim / n_heads (Qwen3); 0: dim / n_heads
  bool qkv_bias = false;   // the q, k and v projections add a bias (Qwen2; LLaMA attention_bias)
  bool output_bias = false;  // so does the attention output projection (LLaMA attention_bias)
  bool mlp_bias = false;   // and the gate, up and down projections (LLaMA mlp_bias)
  bool qk_norm = false;    // RMSNorm over each q and k head before RoPE (Qwen3)
  int sliding_window = 0;  // a position attends to at most this many positions (Mistral); 0: all
  int32_t bos_id = 1;
  std::vector<int32_t> eos_ids = {2};

  int head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  int q_dim() const { return n_heads * head_dim(); }
  // Whether any projection has a bias or the heads have their own norms: the fused decode
  // kernels have no place for those (kernel_table.h, DecodeGemv).
  bool has_biases_or_head_norms() const { return qkv_bias || output_bias || mlp_bias || qk_norm; }
  int kv_dim() const { return n_kv_heads * head_dim(); }

  // Rejects non-positive or inconsistent dimensions with a message saying which.
  Status validate() const;
  // "dim 64, hidden 172, 5 layers, 8 heads (4 kv), vocab 512, seq 512"
  std::string summary() const;
};

// Inverse frequencies θ^(-2i/head_dim) for i < head_dim/2, with LLaMA 3 scaling applied when
// enabled, computed in fp32 as Meta's and HF's reference code do.
std::vector<float> rope_inverse_frequencies(const LlamaConfig& config);

}  // namespace kuiper
