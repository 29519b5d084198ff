// How a chat model expects a conversation to be laid out in tokens. A template turns a system
// prompt and user/assistant messages into the exact token ids the model was fine-tuned on; the
// special tokens (BOS, EOS, <|eot_id|>, headers) are inserted as ids, never parsed from text, so
// that a user typing "<|eot_id|>" or "</s>" cannot forge a turn boundary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper {

// A finished exchange: what the user said and what the assistant answered.
struct ChatExchange {
  std::string user;
  std::string assistant;
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;

  virtual std::string name() const = 0;

  // The tokens that open a turn: the user's message and everything up to where the assistant's
  // reply begins. The first turn of a conversation also carries what precedes all turns (BOS,
  // the system prompt), so `system` matters only when `first_turn`; empty = no system prompt.
  virtual StatusOr<std::vector<int32_t>> open_turn(std::string_view system, std::string_view user,
                                                   bool first_turn) const = 0;
  // The tokens that close an assistant reply in the history (LLaMA 2: EOS; LLaMA 3: <|eot_id|>).
  virtual std::vector<int32_t> close_reply() const = 0;
  // The tokens at which generation of a reply stops.
  virtual std::vector<int32_t> stop_tokens() const = 0;

  // A whole finished exchange from text, as the model's reference chat code encodes it.
  virtual StatusOr<std::vector<int32_t>> encode_exchange(std::string_view system, const ChatExchange& exchange,
                                                         bool first_turn) const = 0;
  // A conversation given as text, ending with an open turn for the assistant to answer: the
  // reference encoding that a conversation's token history reproduces (see conversation.h).
  StatusOr<std::vector<int32_t>> encode_dialog(std::string_view system, std::span<const ChatExchange> exchanges,
                                               std::string_view user) const;
};

// Text with leading and trailing whitespace removed, as the reference chat code does to every
// message (Python's str.strip() on ASCII whitespace, including \x1c-\x1f).
std::string_view strip_message(std::string_view text);

}  // namespace kuiper
