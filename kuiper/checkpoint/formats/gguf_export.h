// Writing a checkpoint as GGUF that llama.cpp loads: architecture `llama` (`qwen2` for q/k/v
// biases only, `qwen3` for per-head q/k norms), llama.cpp's metadata keys and tensor names,
// q/k rows in the layout each architecture uses (gguf_layout.h), matrices all F32, F16, BF16 or
// Q8_0 (int8 in groups of 32 whose scales become fp16), vectors F32, and the tokenizer.
#pragma once

#include <string>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

struct GgufExportOptions {
  std::string tokenizer_path;  // a tokenizer file (gguf_tokenizer_metadata.h); empty: none
  std::string chat_template;   // Jinja, stored as tokenizer.chat_template; empty: none
  std::string name;            // general.name; empty: none
};

// Writes `checkpoint` to `path` (via `path`.partial). Refuses what GGUF or llama.cpp cannot
// express (int8 not in row-aligned groups of 32, a sliding window, mixed matrix formats).
Status save_gguf(const Checkpoint& checkpoint, const GgufExportOptions& options, const std::string& path);

}  // namespace kuiper
