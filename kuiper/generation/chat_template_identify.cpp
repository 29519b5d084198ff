// identify_chat_template: recognises a model's Jinja chat_template by the markers its family's
// templates have in common. Markers, not exact strings: the same layout ships in many spellings
// (whitespace-controlled or not, ' or " quotes, edited copies, GGUF re-exports). Templates that
// carry a family's markers but lay a plain conversation out differently (Mistral's
// [SYSTEM_PROMPT], Phi-4's <|im_sep|>, a reasoning model's generation prompt that opens <think>)
// are refused by their own markers, so that none is mistaken for the family's layout.
#include <ctime>
#include <optional>
#include <string>

#include "kuiper/generation/chat_template_choice.h"

namespace kuiper {
namespace {

bool contains(std::string_view text, std::string_view marker) { return text.find(marker) != std::string_view::npos; }

// How far a default system prompt's literal is looked for. The template is untrusted (a GGUF
// file's metadata): each search is bounded so that no template makes identification quadratic.
constexpr size_t kMaxLiteral = 16 * 1024;

// Whether some `open` in the template is followed by the given role or, in the same expression,
// by the message's role: the template writes role headers from the conversation, rather than a
// fixed prompt around it (Llama Guard's classifier prompt, Yi's bare system text).
bool writes_role_headers(std::string_view source, std::string_view open, std::string_view literal_role) {
  for (size_t at = source.find(open); at != std::string_view::npos; at = source.find(open, at + 1)) {
    const std::string_view after = source.substr(at + open.size(), 40);
    if (after.starts_with(literal_role)) return true;
    const std::string_view before_role = after.substr(0, after.find("role"));
    if (before_role.size() < after.size() && !contains(before_role, "}}") && !contains(before_role, "%}")) return true;
  }
  return false;
}

// The Jinja string literal ('...' or "...", at most kMaxLiteral long) at the start of `text`, unescaped.
std::optional<std::string> string_literal(std::string_view text) {
  if (text.empty() || (text[0] != '\'' && text[0] != '"')) return std::nullopt;
  text = text.substr(0, kMaxLiteral);
  const char quote = text[0];
  std::string value;
  for (size_t i = 1; i < text.size(); ++i) {
    if (text[i] == quote) return value;
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char next = text[++i];
      value += next == 'n' ? '\n' : next == 't' ? '\t' : next;
    } else {
      value += text[i];
    }
  }
  return std::nullopt;
}

// The system prompt a ChatML template supplies when the conversation has none, in the spellings
// real templates use:
//   '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'      (Qwen2, Qwen2.5, SmolLM2)
//   '<|im_start|>system\n' + 'You are Dolphin, ...' + '<|im_end|>\n'
//   {% set system_message = 'You are a helpful assistant.' %}          (a default the
//                                                                       conversation's own replaces)
// A system turn built from the conversation's message has Jinja code, not a literal, there; a
// prompt written only when a thinking switch is on is no default.
std::string chatml_default_system(std::string_view source) {
  const auto conditional = [&](size_t at) { return contains(source.substr(at < 80 ? 0 : at - 80, 80), "thinking"); };
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
    if (conditional(at)) continue;
    for (const std::string_view join : {"' + ", "\" + "}) {
      if (rest.starts_with(join)) {
        if (auto literal = string_literal(rest.substr(join.size()))) return *literal;
      }
    }
    const size_t end = rest.substr(0, kMaxLiteral).find("<|im_end|>");
    if (end == std::string_view::npos || end == 0) continue;
    const std::string_view literal = rest.substr(0, end);
    if (literal.find_first_of("'\"{}") != std::string_view::npos) continue;  // code, not a literal
    if (auto value = string_literal(std::string("'").append(literal).append("'"))) return *value;
  }
  constexpr std::string_view kAssign = "set system_message = ";
  for (size_t at = source.find(kAssign); at != std::string_view::npos; at = source.find(kAssign, at + 1)) {
    if (conditional(at)) continue;
    if (auto literal = string_literal(source.substr(at + kAssign.size()))) return *literal;
  }
  return "";
}

// Whether the template text at `at` lies under a condition or loop: the nearest block tag before
// it opens one ({% if %}, {% elif %}, {% else %}, {% for %}) rather than closing one or setting a
// variable. Enough to tell LLaMA 3.1's system turn (written always, after an {% endif %}) from
// one written only when there is a system prompt.
bool under_condition(std::string_view source, size_t at) {
  const size_t open = source.rfind("{%", at);
  if (open == std::string_view::npos) return false;
  std::string_view tag = source.substr(open + 2, 16);
  while (!tag.empty() && (tag.front() == '-' || tag.front() == '+' || tag.front() == ' ' || tag.front() == '\n')) {
    tag.remove_prefix(1);
  }
  return tag.starts_with("if ") || tag.starts_with("elif ") || tag.starts_with("else") || tag.starts_with("for ");
}

// The text after `marker` up to the end of its string literal or line ("December 2023").
std::string text_after(std::string_view source, std::string_view marker) {
  const size_t at = source.find(marker);
  if (at == std::string_view::npos) return "";
  const std::string_view rest = source.substr(at + marker.size(), 64);
  return std::string(rest.substr(0, rest.find_first_of("\\\"'\n")));
}

// Today as strftime("%d %b %Y") writes it in the C locale ("26 Jul 2024"), the date transformers'
// strftime_now gives a LLaMA 3.2 template.
std::string today_date() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%d %b %Y", &local);
  return text;
}

// A ChatML generation prompt that opens the reply with "<think>" (QwQ, Qwen3-Next/3.5 thinking):
// the layout of the turn being answered then differs from the history's. A closed
// "<think>\n\n</think>" (Qwen3 with thinking switched off) opens nothing.
bool generation_opens_thinking(std::string_view source) {
  if (contains(source, "<|im_start|>assistant\\n<think>") || contains(source, "<|im_start|>assistant\n<think>")) {
    return true;
  }
  const size_t prompt = source.rfind("add_generation_prompt");
  if (prompt == std::string_view::npos) return false;
  const std::string_view tail = source.substr(prompt);
  for (size_t at = tail.find("<think>"); at != std::string_view::npos; at = tail.find("<think>", at + 1)) {
    if (at == 0 || (tail[at - 1] != '\'' && tail[at - 1] != '"')) continue;
    const auto literal = string_literal(tail.substr(at - 1));
    if (literal && !contains(*literal, "</think>")) return true;
  }
  return false;
}

Status unknown(std::string_view what) {
  return unsupported("the model's chat template " + std::string(what) +
                     ", not a layout kuiper knows; choose one with --template llama2|llama3|chatml|mistral");
}

}  // namespace

StatusOr<IdentifiedChatTemplate> identify_chat_template(std::string_view source) {
  if (contains(source, "<|start_header_id|>") && contains(source, "<|eot_id|>")) {
    if (!writes_role_headers(source, "<|start_header_id|>", "system")) {
      return unknown("has LLaMA 3's tokens but writes no role header per message (a fixed prompt such as "
                     "Llama Guard's)");
    }
    if (contains(source, "<|image|>")) return unknown("is a LLaMA 3.2 Vision layout (<|image|>)");
    IdentifiedChatTemplate found{ChatTemplateKind::kLlama3, {}, "LLaMA 3 instruct"};
    // LLaMA 3.1 and later write the system header as a literal, always, and open the turn with
    // the knowledge cutoff and a date: the day it runs where the template asks strftime_now
    // (3.2), else its default date_string.
    if (const size_t header = source.find("<|start_header_id|>system<|end_header_id|>");
        header != std::string_view::npos && !under_condition(source, header)) {
      found.options.always_system_turn = true;
      found.description = "LLaMA 3.1+ instruct (a system turn always)";
    }
    if (found.options.always_system_turn && contains(source, "Cutting Knowledge Date: ")) {
      const std::string cutoff = text_after(source, "Cutting Knowledge Date: ");
      std::string today;
      if (contains(source, "strftime_now")) {
        today = today_date();
      } else if (const size_t at = source.find("set date_string = "); at != std::string_view::npos) {
        today = string_literal(source.substr(at + 18)).value_or("");
      }
      if (cutoff.empty() || today.empty()) {
        return unknown("is LLaMA 3.1-style but its knowledge cutoff or date could not be read");
      }
      found.options.system_preamble = "Cutting Knowledge Date: " + cutoff + "\nToday Date: " + today + "\n\n";
      found.description = "LLaMA 3.1+ instruct (a system turn dated " + today + ")";
    }
    return found;
  }
  if (contains(source, "<|im_start|>") && contains(source, "<|im_end|>")) {
    if (contains(source, "<|im_sep|>")) return unknown("is Phi-4-style ChatML (<|im_sep|> after the role)");
    if (generation_opens_thinking(source)) {
      return unknown("opens every reply with <think> (a reasoning model's layout, unlike the history's turns)");
    }
    if (!writes_role_headers(source, "<|im_start|>", "system")) {
      return unknown("has ChatML's tokens but writes no system turn in ChatML");
    }
    IdentifiedChatTemplate found{ChatTemplateKind::kChatml, {chatml_default_system(source)}, "ChatML"};
    // Qwen3 and other reasoning models: content.split('</think>')[-1] for earlier answers.
    found.options.drops_reasoning = contains(source, "</think>") && contains(source, "split(");
    if (contains(source, "You are Qwen, created by Alibaba Cloud")) found.description = "Qwen2.5 ChatML";
    if (found.options.drops_reasoning) found.description += " (earlier answers without their reasoning)";
    if (!found.options.default_system.empty()) found.description += " with a default system prompt";
    return found;
  }
  if (contains(source, "[INST]") && !contains(source, "bos_token")) {
    return unknown("has [INST] but writes no BOS (bos_token), unlike the LLaMA 2 and Mistral layouts");
  }
  if (contains(source, "[INST]") && contains(source, "<<SYS>>")) {
    return IdentifiedChatTemplate{ChatTemplateKind::kLlama2, {}, "LLaMA 2 chat"};
  }
  if (contains(source, "[INST]") && contains(source, "[/INST]")) {
    // Mistral's v3, Tekken and v7 tokenizers made [INST] control tokens, dropped the spaces
    // around the messages and moved the system prompt to the last user message or to
    // [SYSTEM_PROMPT].
    if (contains(source, "[AVAILABLE_TOOLS]") || contains(source, "loop.last and system_message") ||
        contains(source, "[SYSTEM_PROMPT]")) {
      return unknown("is Mistral v3/Tekken/v7-style ([INST] as a control token, the system prompt with the last "
                     "message or in [SYSTEM_PROMPT]), whose layout differs from Mistral v0.1/v0.2's "
                     "(--template mistral lays out those)");
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
