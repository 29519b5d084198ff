#include "kuiper/generation/chat_template_choice.h"

#include <algorithm>

#include "kuiper/generation/chat_formats.h"

namespace kuiper {
namespace {

bool has_all(const Tokenizer& tokenizer, std::initializer_list<std::string_view> texts) {
  return std::all_of(texts.begin(), texts.end(), [&](std::string_view t) { return tokenizer.special_token(t).has_value(); });
}

// The layout the eos ids of generation_config.json point to: a reply of a LLaMA 3 instruct model
// ends with <|eot_id|>, of a ChatML model with <|im_end|>.
ChatTemplateKind kind_from_eos(const std::vector<int32_t>& eos_ids, const Tokenizer& tokenizer) {
  const auto ends_with = [&](std::string_view text) {
    const auto id = tokenizer.special_token(text);
    return id && std::find(eos_ids.begin(), eos_ids.end(), *id) != eos_ids.end();
  };
  if (ends_with("<|eot_id|>")) return ChatTemplateKind::kLlama3;
  if (ends_with("<|im_end|>")) return ChatTemplateKind::kChatml;
  return ChatTemplateKind::kAuto;
}

// Without any hint: the layouts whose special tokens the vocabulary has were what it was
// trained for; LLaMA 2's needs nothing beyond BOS/EOS.
ChatTemplateKind kind_from_tokenizer(const Tokenizer& tokenizer) {
  if (has_all(tokenizer, {"<|im_start|>", "<|im_end|>"})) return ChatTemplateKind::kChatml;
  if (has_all(tokenizer, {"<|eot_id|>", "<|start_header_id|>"})) return ChatTemplateKind::kLlama3;
  return ChatTemplateKind::kLlama2;
}

}  // namespace

StatusOr<ChatTemplateKind> parse_chat_template_kind(std::string_view name) {
  if (name == "auto") return ChatTemplateKind::kAuto;
  if (name == "llama2") return ChatTemplateKind::kLlama2;
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  if (name == "chatml") return ChatTemplateKind::kChatml;
  if (name == "mistral") return ChatTemplateKind::kMistral;
  return invalid_argument("unknown chat template '" + std::string(name) +
                          "' (use auto, llama2, llama3, chatml or mistral)");
}

StatusOr<std::unique_ptr<ChatFormat>> make_chat_format(ChatTemplateKind kind, ChatFormatOptions options) {
  switch (kind) {
    case ChatTemplateKind::kLlama2: return make_llama2_chat_format();
    case ChatTemplateKind::kLlama3: return make_llama3_chat_format(std::move(options));
    case ChatTemplateKind::kChatml: return make_chatml_chat_format(std::move(options));
    case ChatTemplateKind::kMistral: return make_mistral_chat_format();
    case ChatTemplateKind::kAuto: break;
  }
  return invalid_argument("'auto' names no chat layout: identify the model's template first");
}

StatusOr<std::unique_ptr<ChatTemplate>> choose_chat_template(ChatTemplateKind requested, const ChatTemplateHints& hints,
                                                  const Tokenizer& tokenizer) {
  ChatTemplateKind kind = requested;
  ChatFormatOptions options;
  std::string reason = "chosen with --template";
  if (!hints.jinja.empty()) {
    auto identified = identify_chat_template(hints.jinja);
    if (identified.ok()) {
      options = identified->options;
      if (kind == ChatTemplateKind::kAuto) {
        kind = identified->kind;
        reason = "identified " + identified->description + " in " + hints.jinja_origin;
      }
    } else if (kind == ChatTemplateKind::kAuto) {
      return Status(identified.status().code(), hints.jinja_origin + ": " + identified.status().message());
    }
  }
  if (kind == ChatTemplateKind::kAuto) {
    kind = kind_from_eos(hints.eos_ids, tokenizer);
    reason = "from the eos_token_id of generation_config.json";
  }
  if (kind == ChatTemplateKind::kAuto) {
    kind = kind_from_tokenizer(tokenizer);
    reason = "from the tokenizer's special tokens (the model's files name no chat template; --template chooses one)";
  }
  KUIPER_ASSIGN_OR_RETURN(auto format, make_chat_format(kind, std::move(options)));
  return ChatTemplate::create(std::move(format), tokenizer, hints.eos_ids, std::move(reason));
}

StatusOr<std::unique_ptr<ChatTemplate>> make_chat_template(ChatTemplateKind kind, const Tokenizer& tokenizer) {
  return choose_chat_template(kind, {}, tokenizer);
}

}  // namespace kuiper
