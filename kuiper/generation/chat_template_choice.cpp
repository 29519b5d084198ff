#include "kuiper/generation/chat_template_choice.h"

#include "kuiper/generation/llama_chat_templates.h"

namespace kuiper {

StatusOr<ChatTemplateKind> parse_chat_template_kind(std::string_view name) {
  if (name == "auto") return ChatTemplateKind::kAuto;
  if (name == "llama2") return ChatTemplateKind::kLlama2;
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  return invalid_argument("unknown chat template '" + std::string(name) + "' (use auto, llama2 or llama3)");
}

StatusOr<std::unique_ptr<ChatTemplate>> make_chat_template(ChatTemplateKind kind, const Tokenizer& tokenizer) {
  switch (kind) {
    case ChatTemplateKind::kLlama2:
      return make_llama2_chat_template(tokenizer);
    case ChatTemplateKind::kLlama3:
      return make_llama3_chat_template(tokenizer);
    case ChatTemplateKind::kAuto:
      // LLaMA 3's turn structure needs its own special tokens; a vocabulary without them was
      // not trained on that layout, and LLaMA 2's layout needs nothing beyond BOS/EOS.
      if (tokenizer.special_token("<|eot_id|>") && tokenizer.special_token("<|start_header_id|>")) {
        return make_llama3_chat_template(tokenizer);
      }
      return make_llama2_chat_template(tokenizer);
  }
  return invalid_argument("unknown chat template kind");
}

}  // namespace kuiper
