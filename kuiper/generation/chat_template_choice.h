// Which chat template a model gets: named with --template, or identified from the model's own
// files (the Jinja chat_template of tokenizer_config.json or a GGUF file, the eos ids of
// generation_config.json), or, when the files say nothing, from the tokenizer's special tokens.
// The formats live in their own files (chat_formats.h); this is the one place that lists them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/generation/chat_formats.h"

namespace kuiper {

enum class ChatTemplateKind { kAuto, kLlama2, kLlama3, kChatml, kMistral };

// "auto", "llama2", "llama3", "chatml", "mistral" -> kind.
StatusOr<ChatTemplateKind> parse_chat_template_kind(std::string_view name);

// A known layout recognised in a Jinja chat_template.
struct IdentifiedChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kAuto;
  ChatFormatOptions options;  // what the template does beyond its family's plain layout
  std::string description;  // what was recognised, for messages ("Qwen2.5 ChatML")
};

// Which known layout a model's Jinja chat_template is, recognised by the markers each family's
// templates share (role tokens, [INST]/<<SYS>>, default system prompts), not by comparing one
// exact string, so that re-formatted or slightly edited copies are recognised too. Fails with
// kUnsupported, saying what it saw and suggesting --template, for any other template (including
// Mistral v3's and Phi-4's, whose layouts differ from the ones kuiper writes). Used for
// tokenizer_config.json's chat_template and for a GGUF file's tokenizer.chat_template.
StatusOr<IdentifiedChatTemplate> identify_chat_template(std::string_view jinja_source);

// What a model's files say about its chat layout.
struct ChatTemplateHints {
  std::string jinja;             // the model's Jinja chat_template; empty = none
  std::string jinja_origin;      // where it came from, for messages ("model/tokenizer_config.json")
  std::vector<int32_t> eos_ids;  // generation_config.json's eos_token_id: the tokens that end a reply
};

// Reads the hints from a model directory (or the directory of a model file; a GGUF file from its
// tokenizer.chat_template and eos/eot ids): the chat_template
// of tokenizer_config.json (the "default" one where it holds several) or of chat_template.jinja,
// and generation_config.json's eos_token_id. Missing files give empty hints; damaged ones fail.
StatusOr<ChatTemplateHints> read_chat_template_hints(const std::string& model_path);

// The template for a model. kAuto identifies the hints' Jinja template (an unknown one fails),
// else uses generation_config.json's eos ids (<|eot_id|> -> llama3, <|im_end|> -> chatml), else
// the tokenizer: ChatML or LLaMA 3 when it has their special tokens, LLaMA 2 otherwise. An
// explicit kind is used as asked, with what the hints' template adds to its family's layout
// (ChatML's default system prompt, LLaMA 3.1's dated system turn). A kind the tokenizer cannot
// express fails. The hints' eos ids also stop replies; ChatTemplate::origin() says how it was chosen.
// The template refers to `tokenizer`, which must outlive it.
StatusOr<std::unique_ptr<ChatTemplate>> choose_chat_template(ChatTemplateKind requested, const ChatTemplateHints& hints,
                                                  const Tokenizer& tokenizer);

// The layout of a kind, without a tokenizer (for rendering text); kAuto names no layout and fails.
StatusOr<std::unique_ptr<ChatFormat>> make_chat_format(ChatTemplateKind kind, ChatFormatOptions options = {});

// choose_chat_template without hints.
StatusOr<std::unique_ptr<ChatTemplate>> make_chat_template(ChatTemplateKind kind, const Tokenizer& tokenizer);

}  // namespace kuiper
