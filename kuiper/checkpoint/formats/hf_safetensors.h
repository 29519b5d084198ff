// Hugging Face LLaMA model directories: config.json plus the weights in model.safetensors, or in
// shards listed by model.safetensors.index.json. Weights stay memory-mapped (fp32/fp16/bf16,
// used in place where aligned) except the q/k projections: HF stores their rows permuted for the
// rotate-half RoPE form, and kuiper rotates interleaved pairs (Meta/llama2.c), so those are
// un-permuted into a copy at load. An HF model and its llama2.c export thus give the same logits.
#pragma once

#include <string>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// Loads the model in `dir`. Errors name the file and tensor at fault.
StatusOr<Checkpoint> load_hf_checkpoint(const std::string& dir);


// Rows of a q or k projection [n_heads * head_dim, cols] reordered from HF's layout (each head's
// first half of rows pairs with its second half) to interleaved pairs (rows 2i, 2i+1). Any dtype.
StatusOr<Tensor> unpermute_rope_rows(const Tensor& hf_weight, int n_heads);
// The inverse: interleaved rows back into HF's order (for writers of HF-ordered files).
StatusOr<Tensor> permute_rope_rows(const Tensor& interleaved_weight, int n_heads);

}  // namespace kuiper
