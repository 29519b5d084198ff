// The chat layouts kuiper knows, one family per file; chat_template_choice.h chooses between them.
#pragma once

#include <memory>
#include <string>

#include "kuiper/generation/chat_template.h"

namespace kuiper {

// Meta's LLaMA 2 chat layout: "[INST] ... [/INST]" per turn, BOS/EOS around each exchange.
std::unique_ptr<ChatFormat> make_llama2_chat_format();

// What a model's template does beyond its family's plain layout.
struct ChatFormatOptions {
  // ChatML: the system prompt the template supplies when the conversation has none (Qwen2.5's
  // "You are Qwen, ..."); empty for templates that then have no system turn at all (Qwen3).
  std::string default_system;
  // ChatML: earlier answers keep only what follows their "</think>" (Qwen3 drops the reasoning).
  bool drops_reasoning = false;
  // LLaMA 3: a system turn even without a system prompt (LLaMA 3.1 and later), opening with
  // `system_preamble` ("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n").
  bool always_system_turn = false;
  std::string system_preamble = {};
};

// Meta's LLaMA 3 instruct layout: role headers and <|eot_id|> (LLaMA 3.1+: with a dated system turn).
std::unique_ptr<ChatFormat> make_llama3_chat_format(ChatFormatOptions options = {});

// ChatML (Qwen): "<|im_start|>role\n...<|im_end|>\n".
std::unique_ptr<ChatFormat> make_chatml_chat_format(ChatFormatOptions options);

// Mistral-7B-Instruct v0.1/v0.2 (Mistral's "v1" tokenizer layout): " [INST] ... [/INST]" per turn
// after one BOS, the system prompt prepended to the first user message.
std::unique_ptr<ChatFormat> make_mistral_chat_format();

}  // namespace kuiper
