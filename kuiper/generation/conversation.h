// A multi-turn chat on top of a Session: each user turn is laid out by a ChatTemplate, only the
// tokens the KV cache does not hold yet are prefilled, and the reply is generated in place.
//
// History. A turn in the history is  open_turn(user) + reply ids + close_reply(). The reply is
// kept as the token ids the model generated, not as text: re-encoding the reply's text can give
// other ids (LLaMA 2's reference encodes the answer in one SentencePiece call with its
// instruction and a trailing space; a sampled reply need not be in canonical tokenization), and
// the ids are what the cache already holds; except where the template rewrites earlier answers
// (Qwen3 drops their reasoning: ChatTemplate::history_reply), and then the cache is re-read from
// that reply on. With canonical reply ids the history equals ChatTemplate::encode_dialog of the
// same conversation (LLaMA 3 and Mistral exactly; ChatML up to the role line and the answer being
// one tokenizer call there; LLaMA 2 up to the reference's space before EOS).
//
// The cache. Before a turn, the conversation's token sequence is compared with what the cache
// holds; the cache is cut back to their common prefix and only the rest is prefilled. In a
// normal turn that is the previous reply's closing token (the Session does not cache the stop
// token it samples, and prefilling it with the next turn costs no extra pass) plus the new
// turn's tokens. After dropping turns it is everything after the unchanged start (BOS and, for
// both templates, the system prompt stay cached when they open the sequence).
//
// Context policy. A turn is accepted when the history, the new turn and a reserve for the reply
// fit in the context. The reserve is min(max_reply, context / 4), at least 1: a full max_reply
// when it is small next to the context, but never so large that a long max_reply forces the
// conversation down to a single turn. When the turn does not fit, the oldest whole turns are
// dropped (the system prompt is kept) until it does; when even the system prompt and the new
// turn alone do not fit, the turn is refused with kOutOfRange and nothing changes. The reply
// itself is cut at max_reply or at the end of the context, whichever comes first, so nothing is
// ever written past the cache.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kuiper/generation/chat_template.h"
#include "kuiper/generation/session.h"

namespace kuiper {

struct TurnStats {
  int prefilled_tokens = 0;  // tokens run through the model before the reply (this turn's prefill)
  int dropped_turns = 0;     // oldest turns dropped to make room for this one
  int context_tokens = 0;    // tokens in the cache after the reply
  GenerationStats generation;
};

class Conversation {
 public:
  // `session`, `chat_template` and the model behind them must outlive the conversation.
  Conversation(Session& session, const ChatTemplate& chat_template, std::string system, int max_reply);

  // Adds a user turn and generates the reply, streaming it through `on_piece` (returning false
  // stops the reply; what was generated so far stays in the history).
  StatusOr<TurnStats> reply(std::string_view user, const PieceCallback& on_piece);

  // Starts over: no turns, an empty cache. The system prompt stays.
  void reset();

  // Tokens the conversation so far occupies in the cache, closing tokens included.
  StatusOr<std::vector<int32_t>> history_tokens() const;
  int turn_count() const { return static_cast<int>(turns_.size()); }
  // Positions kept free for a reply when accepting a turn (see the context policy above).
  int reply_reserve() const;

 private:
  struct Turn {
    std::string user;
    std::vector<int32_t> reply;  // the generated ids, closing token excluded
  };

  // History of turns_[first, end) followed by the open turn `user`, as the cache should hold it.
  StatusOr<std::vector<int32_t>> sequence(size_t first, std::string_view user) const;
  Status append_history(size_t first, std::vector<int32_t>& ids) const;

  Session& session_;
  const ChatTemplate& template_;
  std::string system_;
  int max_reply_;
  std::vector<Turn> turns_;
};

}  // namespace kuiper
