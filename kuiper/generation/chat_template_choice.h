// Which chat template a model gets: chosen by name (--template) or from its tokenizer. The
// templates live in their own files (llama_chat_templates.h); this is the one place that
// lists them.
#pragma once

#include <memory>
#include <string_view>

#include "kuiper/generation/chat_template.h"

namespace kuiper {

enum class ChatTemplateKind { kAuto, kLlama2, kLlama3 };

// "auto", "llama2", "llama3" -> kind.
StatusOr<ChatTemplateKind> parse_chat_template_kind(std::string_view name);

// The template for a tokenizer. kAuto picks LLaMA 3 when the tokenizer has its header and
// end-of-turn tokens, LLaMA 2 otherwise; an explicit kind the tokenizer cannot express fails.
// The template refers to `tokenizer`, which must outlive it.
StatusOr<std::unique_ptr<ChatTemplate>> make_chat_template(ChatTemplateKind kind, const Tokenizer& tokenizer);

}  // namespace kuiper
