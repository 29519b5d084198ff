// The two templates kuiper knows, each in its own file; make_chat_template chooses between them.
#pragma once

#include <memory>

#include "kuiper/generation/chat_template.h"

namespace kuiper {

// Meta's LLaMA 2 chat layout: "[INST] ... [/INST]" per turn, BOS/EOS around each exchange.
std::unique_ptr<ChatTemplate> make_llama2_chat_template(const Tokenizer& tokenizer);

// Meta's LLaMA 3 instruct layout: role headers and <|eot_id|>; fails when the tokenizer lacks
// one of the special tokens it needs.
StatusOr<std::unique_ptr<ChatTemplate>> make_llama3_chat_template(const Tokenizer& tokenizer);

}  // namespace kuiper
