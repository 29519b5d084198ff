// The config.json of a Hugging Face LlamaForCausalLM model, read into a LlamaConfig. Accepts the
// RoPE settings in both spellings transformers has written: "rope_theta" + "rope_scaling"
// (transformers 4) and "rope_parameters" (transformers 5). Anything kuiper's network would
// compute differently (other architectures, other RoPE types, biases, a head_dim that is not
// hidden_size / num_attention_heads) is refused rather than run wrongly.
#pragma once

#include <string>

#include "kuiper/base/status.h"
#include "kuiper/model/llama_config.h"

namespace kuiper {

// `source` names the config in error messages (usually its path).
StatusOr<LlamaConfig> parse_hf_llama_config(const std::string& json_text, const std::string& source);

StatusOr<LlamaConfig> load_hf_llama_config(const std::string& path);

}  // namespace kuiper
