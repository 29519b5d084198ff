// How kuiper's model is laid out in a GGUF file, as llama.cpp names and stores it: the tensor
// names, which q/k layout each architecture uses, and LLaMA 3 RoPE scaling as a factor tensor.
// Shared by the reader (gguf.cpp) and the writer (gguf_writer.cpp) so they cannot disagree.
//
// q/k layout: llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) turns the rows
// of `llama` q/k projections (and their biases) from HF's rotate-half order back into Meta's
// interleaved pairs, which llama.cpp rotates in its "normal" RoPE; kuiper's layout is the same,
// so those are used as stored. `qwen2` and `qwen3` tensors are stored unpermuted (HF order; llama.cpp
// rotates them in its NEOX mode), so their q/k rows, biases and per-head norms are re-ordered as
// the HF safetensors loader does.
#pragma once

#include <string>
#include <vector>

#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_weights.h"

namespace kuiper {

// The architectures kuiper reads, as general.architecture names them.
inline constexpr const char* kGgufArchitectures[] = {"llama", "qwen2", "qwen3"};

// Whether `arch`'s q/k tensors are in HF's rotate-half order (see above).
bool gguf_qk_in_hf_order(const std::string& arch);

// "blk.3.attn_q.weight" for layer 3, suffix "attn_q.weight".
std::string gguf_layer_tensor(int layer, const std::string& suffix);

// The GGUF base name ("attn_q", "ffn_gate", ...) of each layer matrix, in kLayerMatrices' order.
inline constexpr const char* kGgufLayerMatrixNames[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                        "ffn_gate", "ffn_down", "ffn_up"};

// A layer's fp32 vectors with their GGUF names, present where config `c` has them.
struct GgufLayerVector {
  std::string suffix;  // "attn_norm.weight", "attn_q.bias", ...
  Tensor LlamaLayerWeights::*member;
  int64_t length;
  int rope_heads;  // > 0: follows q/k rows in `rope_heads` heads (bias) or one head (norm)
};
std::vector<GgufLayerVector> gguf_layer_vectors(const LlamaConfig& c);

// LLaMA 3 scaling as llama.cpp keeps it: tensor rope_freqs.weight holds, per frequency, the
// factor its unscaled value is divided by.
// A q or k weight (int8/int4 scales and mins move with their rows: GGUF blocks never cross a row) or vector
// (bias: heads; per-head norm: 1 head) from HF's order into kuiper's interleaved one, or back.
StatusOr<op::Weight> reorder_rope_weight(const op::Weight& w, int heads, bool to_interleaved);
StatusOr<Tensor> reorder_rope_vector(const Tensor& v, int heads, bool to_interleaved);

inline constexpr const char* kGgufRopeFactors = "rope_freqs.weight";
std::vector<float> llama3_rope_factors(const LlamaConfig& c);

}  // namespace kuiper
