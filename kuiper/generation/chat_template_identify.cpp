// identify_chat_template: recognises a model's Jinja chat_template by the markers its family's
// templates have in common. Markers, not exact strings: the same layout ships in many spellings
// (whitespace-controlled or not, ' or " quotes, edited copies, GGUF re-exports).
#include <string>

#include "kuiper/generation/chat_template_choice.h"

namespace kuiper {
namespace {

bool contains(std::string_view text, std::string_view marker) { return text.find(marker) != std::string_view::npos; }

// Jinja string-literal escapes as they occur inside a default system prompt.
std::string unescape(std::string_view literal) {
  std::string text;
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size()) {
      const char next = literal[++i];
      text += next == 'n' ? '\n' : next == 't' ? '\t' : next;
    } else {
      text += literal[i];
    }
  }
  return text;
}

// The system prompt a ChatML template writes as a literal, "<|im_start|>system\n{default}<|im_end|>"
// (Qwen2: "You are a helpful assistant.", Qwen2.5: "You are Qwen, ..."). A system turn built
// from the conversation's own message has Jinja code, not a literal, between the two markers.
std::string chatml_default_system(std::string_view source) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  for (size_t at = source.find(kOpen); at != std::string_view::npos; at = source.find(kOpen, at + 1)) {
    std::string_view rest = source.substr(at + kOpen.size());
    if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    const size_t end = rest.find("<|im_end|>");
    if (end == std::string_view::npos || end == 0) continue;
    const std::string_view literal = rest.substr(0, end);
    if (literal.find_first_of("'\"{}") != std::string_view::npos) continue;  // code, not a literal
    return unescape(literal);
  }
  return "";
}

Status unknown(std::string_view what) {
  return unsupported("the model's chat template " + std::string(what) +
                     ", not a layout kuiper knows; choose one with --template llama2|llama3|chatml|mistral");
}

}  // namespace

StatusOr<IdentifiedChatTemplate> identify_chat_template(std::string_view source) {
  if (contains(source, "<|start_header_id|>") && contains(source, "<|eot_id|>")) {
    // LLaMA 3.1 and later always write a system turn with knowledge and current dates, and tool
    // turns; their layout of a plain conversation is not LLaMA 3's.
    if (contains(source, "Cutting Knowledge Date") || contains(source, "Environment: ipython")) {
      return unknown("is LLaMA 3.1-style (a system turn with 'Cutting Knowledge Date'), whose layout differs "
                     "from LLaMA 3's (--template llama3 lays out LLaMA 3's)");
    }
    return IdentifiedChatTemplate{ChatTemplateKind::kLlama3, {}, "LLaMA 3 instruct"};
  }
  if (contains(source, "<|im_start|>") && contains(source, "<|im_end|>")) {
    IdentifiedChatTemplate found{ChatTemplateKind::kChatml, {chatml_default_system(source)}, "ChatML"};
    // Qwen3 and other reasoning models: content.split('</think>')[-1] for earlier answers.
    found.chatml.drops_reasoning = contains(source, "</think>") && contains(source, "split(");
    if (contains(source, "You are Qwen, created by Alibaba Cloud")) found.description = "Qwen2.5 ChatML";
    if (found.chatml.drops_reasoning) found.description += " (earlier answers without their reasoning)";
    if (!found.chatml.default_system.empty()) found.description += " with a default system prompt";
    return found;
  }
  if (contains(source, "[INST]") && contains(source, "<<SYS>>")) {
    return IdentifiedChatTemplate{ChatTemplateKind::kLlama2, {}, "LLaMA 2 chat"};
  }
  if (contains(source, "[INST]") && contains(source, "[/INST]")) {
    // Mistral's v3 and Tekken tokenizers made [INST] control tokens, dropped the spaces around
    // the messages and moved the system prompt to the last user message.
    if (contains(source, "[AVAILABLE_TOOLS]") || contains(source, "loop.last and system_message")) {
      return unknown("is Mistral v3/Tekken-style (system prompt with the last message, [INST] as a control "
                     "token), whose layout differs from Mistral v0.1/v0.2's (--template mistral lays out those)");
    }
    return IdentifiedChatTemplate{ChatTemplateKind::kMistral, {}, "Mistral instruct v1"};
  }
  std::string head(source.substr(0, 60));
  for (char& c : head) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';  // one line
  }
  return unknown("('" + head + (source.size() > head.size() ? "...'" : "'") +
                 ") has none of the markers of LLaMA 2 ([INST], <<SYS>>), LLaMA 3 (<|start_header_id|>), "
                 "ChatML (<|im_start|>) or Mistral ([INST] without <<SYS>>)");
}

}  // namespace kuiper
