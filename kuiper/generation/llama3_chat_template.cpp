// LLaMA 3 instruct, as Meta's reference ChatFormat lays it out (and Meta-Llama-3-*-Instruct's
// Jinja template renders it):
//   <|begin_of_text|>
//   <|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>        (when there is one)
//   <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
//   <|start_header_id|>assistant<|end_header_id|>\n\n{assistant}<|eot_id|>  ... and for the
// open turn the assistant header alone. LLaMA 3.1 and later (Llama-3.1/3.2/3.3-Instruct) always
// write the system turn, opening "Cutting Knowledge Date: ...\nToday Date: ...\n\n" before the
// (possibly empty) system prompt (ChatFormatOptions). Messages are stripped and encoded on their own, as the
// reference does (the same ids as encoding the whole text with special tokens allowed, since
// tiktoken's pre-tokenizer never joins the header's "\n\n" with a stripped message).
#include "kuiper/generation/chat_formats.h"

namespace kuiper {
namespace {

class Llama3ChatFormat final : public ChatFormat {
 public:
  explicit Llama3ChatFormat(ChatFormatOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "llama3"; }

  ChatLayout open_turn(std::string_view system, std::string_view user, bool first_turn) const override {
    ChatLayout layout;
    if (first_turn) {
      layout.push_back(special_piece("<|begin_of_text|>"));
      if (options_.always_system_turn) {
        append_header("system", layout);
        layout.push_back(text_piece(options_.system_preamble + std::string(strip_message(system))));
        layout.push_back(special_piece("<|eot_id|>"));
      } else if (!system.empty()) {
        append_message("system", system, layout);
      }
    }
    append_message("user", user, layout);
    append_header("assistant", layout);
    return layout;
  }

  ChatLayout close_reply() const override { return {special_piece("<|eot_id|>")}; }
  std::vector<std::string> stop_specials() const override { return {"<|eot_id|>"}; }

  ChatLayout exchange(std::string_view system, const ChatExchange& exchange, bool first_turn) const override {
    ChatLayout layout = open_turn(system, exchange.user, first_turn);
    layout.push_back(text_piece(std::string(strip_message(exchange.assistant))));
    layout.push_back(special_piece("<|eot_id|>"));
    return layout;
  }

 private:
  static void append_header(std::string_view role, ChatLayout& layout) {
    layout.push_back(special_piece("<|start_header_id|>"));
    layout.push_back(text_piece(std::string(role)));
    layout.push_back(special_piece("<|end_header_id|>"));
    layout.push_back(text_piece("\n\n"));
  }

  static void append_message(std::string_view role, std::string_view content, ChatLayout& layout) {
    append_header(role, layout);
    layout.push_back(text_piece(std::string(strip_message(content))));
    layout.push_back(special_piece("<|eot_id|>"));
  }

  ChatFormatOptions options_;
};

}  // namespace

std::unique_ptr<ChatFormat> make_llama3_chat_format(ChatFormatOptions options) {
  return std::make_unique<Llama3ChatFormat>(std::move(options));
}

}  // namespace kuiper
