// The chat layouts kuiper knows, one family per file; chat_template_choice.h chooses between them.
#pragma once

#include <memory>
#include <string>

#include "kuiper/generation/chat_template.h"

namespace kuiper {

// Meta's LLaMA 2 chat layout: "[INST] ... [/INST]" per turn, BOS/EOS around each exchange.
std::unique_ptr<ChatFormat> make_llama2_chat_format();

// Meta's LLaMA 3 instruct layout: role headers and <|eot_id|>.
std::unique_ptr<ChatFormat> make_llama3_chat_format();

// What a model's ChatML template does beyond the plain layout.
struct ChatmlOptions {
  // The system prompt the template supplies when the conversation has none (Qwen2.5's "You are
  // Qwen, ..."); empty for templates that then have no system turn at all (Qwen3).
  std::string default_system;
  // Earlier answers keep only what follows their "</think>" (Qwen3 drops the reasoning).
  bool drops_reasoning = false;
};

// ChatML (Qwen): "<|im_start|>role\n...<|im_end|>\n".
std::unique_ptr<ChatFormat> make_chatml_chat_format(ChatmlOptions options);

// Mistral-7B-Instruct v0.1/v0.2 (Mistral's "v1" tokenizer layout): " [INST] ... [/INST]" per turn
// after one BOS, the system prompt prepended to the first user message.
std::unique_ptr<ChatFormat> make_mistral_chat_format();

}  // namespace kuiper
