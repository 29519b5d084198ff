// Mistral-7B-Instruct v0.1/v0.2, Mistral's "v1" tokenizer layout, as mistral_common encodes it
// and the models' current Jinja template renders it:
//   <s> [INST] {system}\n\n{user} [/INST] {assistant}</s> [INST] {user} [/INST] ...
// One BOS for the whole conversation; the system prompt is prepended to the first user message;
// messages are not stripped. mistral_common encodes "[INST] ... [/INST]" and each answer with
// their own SentencePiece calls, whose dummy-prefix space is the space the template writes
// before them.
#include "kuiper/generation/chat_formats.h"

namespace kuiper {
namespace {

class MistralChatFormat final : public ChatFormat {
 public:
  std::string name() const override { return "mistral"; }

  ChatLayout open_turn(std::string_view system, std::string_view user, bool first_turn) const override {
    ChatLayout layout;
    std::string message(user);
    if (first_turn) {
      layout.push_back(bos_piece("<s>"));
      if (!system.empty()) message = std::string(system) + "\n\n" + message;
    }
    layout.push_back(spaced("[INST] " + message + " [/INST]"));
    return layout;
  }

  ChatLayout close_reply() const override { return {eos_piece("</s>")}; }
  std::vector<std::string> stop_specials() const override { return {}; }

  ChatLayout exchange(std::string_view system, const ChatExchange& exchange, bool first_turn) const override {
    ChatLayout layout = open_turn(system, exchange.user, first_turn);
    layout.push_back(spaced(exchange.assistant));
    layout.push_back(eos_piece("</s>"));
    return layout;
  }

 private:
  static ChatPiece spaced(std::string text) {
    ChatPiece piece = text_piece(std::move(text));
    piece.space_from_tokenizer = true;
    return piece;
  }
};

}  // namespace

std::unique_ptr<ChatFormat> make_mistral_chat_format() { return std::make_unique<MistralChatFormat>(); }

}  // namespace kuiper
