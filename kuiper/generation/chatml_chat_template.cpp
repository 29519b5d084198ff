// ChatML, as Qwen2/2.5/3's Jinja templates render it for a plain conversation:
//   <|im_start|>system\n{system}<|im_end|>\n          (the model's default when none is given)
//   <|im_start|>user\n{user}<|im_end|>\n
//   <|im_start|>assistant\n{assistant}<|im_end|>\n   ... and for the open turn
//   <|im_start|>assistant\n
// Messages are not stripped (the templates do not strip them); Qwen3's drops the reasoning of
// earlier answers (ChatFormatOptions). Each stretch between special
// tokens is one tokenizer call, as the rendered text is split by transformers before encoding,
// so a role line and its message are encoded together.
#include "kuiper/generation/chat_formats.h"

namespace kuiper {
namespace {

class ChatmlFormat final : public ChatFormat {
 public:
  explicit ChatmlFormat(ChatFormatOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "chatml"; }

  ChatLayout open_turn(std::string_view system, std::string_view user, bool first_turn) const override {
    ChatLayout layout = user_turn(system, user, first_turn);
    layout.push_back(special_piece("<|im_start|>"));
    layout.push_back(text_piece("assistant\n"));
    return layout;
  }

  ChatLayout close_reply() const override { return {special_piece("<|im_end|>"), text_piece("\n")}; }
  std::vector<std::string> stop_specials() const override { return {"<|im_end|>"}; }

  ChatLayout exchange(std::string_view system, const ChatExchange& exchange, bool first_turn) const override {
    ChatLayout layout = user_turn(system, exchange.user, first_turn);
    append_message("assistant", kept_answer(exchange.assistant).value_or(exchange.assistant), layout);
    return layout;
  }

  // Qwen3: content.split('</think>')[-1].lstrip('\n') when the answer has a "</think>".
  std::optional<std::string> kept_answer(std::string_view answer) const override {
    constexpr std::string_view kEnd = "</think>";
    const size_t end = answer.rfind(kEnd);
    if (!options_.drops_reasoning || end == std::string_view::npos) return std::nullopt;
    std::string_view kept = answer.substr(end + kEnd.size());
    while (kept.starts_with('\n')) kept.remove_prefix(1);
    return std::string(kept);
  }

 private:
  ChatLayout user_turn(std::string_view system, std::string_view user, bool first_turn) const {
    ChatLayout layout;
    if (first_turn) {
      const std::string_view shown = system.empty() ? std::string_view(options_.default_system) : system;
      if (!shown.empty()) append_message("system", shown, layout);
    }
    append_message("user", user, layout);
    return layout;
  }

  static void append_message(std::string_view role, std::string_view content, ChatLayout& layout) {
    layout.push_back(special_piece("<|im_start|>"));
    layout.push_back(text_piece(std::string(role) + "\n" + std::string(content)));
    layout.push_back(special_piece("<|im_end|>"));
    layout.push_back(text_piece("\n"));
  }

  ChatFormatOptions options_;
};

}  // namespace

std::unique_ptr<ChatFormat> make_chatml_chat_format(ChatFormatOptions options) {
  return std::make_unique<ChatmlFormat>(std::move(options));
}

}  // namespace kuiper
