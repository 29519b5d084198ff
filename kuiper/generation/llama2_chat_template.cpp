// LLaMA 2 chat, as Meta's reference chat_completion lays it out (and Llama-2-*-chat-hf's Jinja
// template renders it):
//   finished exchange:  BOS "[INST] {user} [/INST] {assistant} " EOS
//   open turn:          BOS "[INST] {user} [/INST]"
// with the system prompt folded into the first user message as
// "<<SYS>>\n{system}\n<</SYS>>\n\n{user}", and each message stripped (the folded message as a
// whole). Each BOS "[INST] ..." stretch is one SentencePiece call, so it gets one dummy-prefix space.
#include "kuiper/generation/chat_formats.h"

namespace kuiper {
namespace {

class Llama2ChatFormat final : public ChatFormat {
 public:
  std::string name() const override { return "llama2"; }

  ChatLayout open_turn(std::string_view system, std::string_view user, bool first_turn) const override {
    return {bos_piece("<s>"), text_piece(instruction(system, user, first_turn))};
  }

  ChatLayout close_reply() const override { return {eos_piece("</s>")}; }
  std::vector<std::string> stop_specials() const override { return {}; }

  ChatLayout exchange(std::string_view system, const ChatExchange& exchange, bool first_turn) const override {
    // The answer shares the SentencePiece call with its instruction, and ends with a space.
    std::string stretch = instruction(system, exchange.user, first_turn);
    stretch += ' ';
    stretch += strip_message(exchange.assistant);
    stretch += ' ';
    return {bos_piece("<s>"), text_piece(std::move(stretch)), eos_piece("</s>")};
  }

 private:
  // "[INST] {message} [/INST]", the system prompt folded into the first turn's message.
  static std::string instruction(std::string_view system, std::string_view user, bool first_turn) {
    std::string message;
    if (first_turn && !system.empty()) {
      message = "<<SYS>>\n" + std::string(system) + "\n<</SYS>>\n\n";
    }
    message += user;
    return "[INST] " + std::string(strip_message(message)) + " [/INST]";
  }
};

}  // namespace

std::unique_ptr<ChatFormat> make_llama2_chat_format() { return std::make_unique<Llama2ChatFormat>(); }

}  // namespace kuiper
