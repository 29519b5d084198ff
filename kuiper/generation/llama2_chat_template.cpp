// LLaMA 2 chat, as Meta's reference chat_completion lays it out:
//   finished exchange:  BOS "[INST] {user} [/INST] {assistant} " EOS
//   open turn:          BOS "[INST] {user} [/INST]"
// with the system prompt folded into the first user message as
// "<<SYS>>\n{system}\n<</SYS>>\n\n{user}", and each message stripped (the folded message as a
// whole). Each BOS "[INST] ..." stretch is one SentencePiece call, so it gets one dummy-prefix space.
#include <string>

#include "kuiper/generation/llama_chat_templates.h"

namespace kuiper {
namespace {

class Llama2ChatTemplate final : public ChatTemplate {
 public:
  explicit Llama2ChatTemplate(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  std::string name() const override { return "llama2"; }

  StatusOr<std::vector<int32_t>> open_turn(std::string_view system, std::string_view user,
                                           bool first_turn) const override {
    return encode_with_bos(instruction(system, user, first_turn));
  }

  std::vector<int32_t> close_reply() const override { return {eos_id()}; }
  std::vector<int32_t> stop_tokens() const override { return tokenizer_.eos_ids(); }

  StatusOr<std::vector<int32_t>> encode_exchange(std::string_view system, const ChatExchange& exchange,
                                                 bool first_turn) const override {
    // The answer shares the SentencePiece call with its instruction, and ends with a space.
    std::string text = instruction(system, exchange.user, first_turn);
    text += ' ';
    text += strip_message(exchange.assistant);
    text += ' ';
    KUIPER_ASSIGN_OR_RETURN(auto ids, encode_with_bos(text));
    ids.push_back(eos_id());
    return ids;
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

  StatusOr<std::vector<int32_t>> encode_with_bos(const std::string& text) const {
    KUIPER_ASSIGN_OR_RETURN(auto ids, tokenizer_.encode(text, {.add_bos = false, .allow_special = false}));
    ids.insert(ids.begin(), tokenizer_.bos_id());
    return ids;
  }

  // The tokenizer's first end token is its EOS (LLaMA 3 vocabularies list <|eot_id|> after it).
  int32_t eos_id() const { return tokenizer_.eos_ids().front(); }

  const Tokenizer& tokenizer_;
};

}  // namespace

std::unique_ptr<ChatTemplate> make_llama2_chat_template(const Tokenizer& tokenizer) {
  return std::make_unique<Llama2ChatTemplate>(tokenizer);
}

}  // namespace kuiper
