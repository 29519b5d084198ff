// How a chat model expects a conversation to be laid out. A chat format (one per model family,
// chat_formats.h) describes the layout as pieces: text, and special tokens named by their text;
// a ChatTemplate turns those pieces into the exact token ids the model was fine-tuned on with
// the model's tokenizer. Special tokens are inserted as ids, never parsed from text, so that a
// user typing "<|eot_id|>" or "</s>" cannot forge a turn boundary. The same pieces, joined,
// are the text the model's own Jinja chat_template renders (render_layout), which is how the
// layouts are checked against the models' templates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// One stretch of a chat layout. Each text piece is encoded by its own tokenizer call, so a
// family's format decides where the calls split (LLaMA 2 encodes "[INST] ... [/INST] answer "
// in one SentencePiece call, Meta's LLaMA 3 code encodes each message alone).
struct ChatPiece {
  enum class Kind {
    kText,     // text, encoded with special-token text kept as text
    kSpecial,  // a special token named by its text ("<|im_start|>")
    kBos,      // the tokenizer's beginning-of-sequence token; `text` is how templates write it
    kEos,      // the tokenizer's end-of-sequence token; `text` is how templates write it
  };
  Kind kind;
  std::string text;
  // Text only: the piece renders with one leading space that the tokenizer's own prefix space
  // stands for when it is encoded (Mistral's template writes " [INST]" where SentencePiece
  // encodes "[INST]" with its dummy prefix).
  bool space_from_tokenizer = false;
};
using ChatLayout = std::vector<ChatPiece>;

inline ChatPiece text_piece(std::string text) { return {ChatPiece::Kind::kText, std::move(text)}; }
inline ChatPiece special_piece(std::string text) { return {ChatPiece::Kind::kSpecial, std::move(text)}; }
inline ChatPiece bos_piece(std::string text) { return {ChatPiece::Kind::kBos, std::move(text)}; }
inline ChatPiece eos_piece(std::string text) { return {ChatPiece::Kind::kEos, std::move(text)}; }

// The pieces joined into the text the model's Jinja template renders.
std::string render_layout(const ChatLayout& layout);

// A family's layout, independent of any tokenizer.
class ChatFormat {
 public:
  virtual ~ChatFormat() = default;

  virtual std::string name() const = 0;

  // What opens a turn: the user's message and everything up to where the assistant's reply
  // begins. The first turn of a conversation also carries what precedes all turns (BOS, the
  // system prompt), so `system` matters only when `first_turn`; empty = no system prompt.
  virtual ChatLayout open_turn(std::string_view system, std::string_view user, bool first_turn) const = 0;
  // What closes an assistant reply in the history (LLaMA 2: EOS; LLaMA 3: <|eot_id|>).
  virtual ChatLayout close_reply() const = 0;
  // A whole finished exchange, as the model's reference chat code lays it out.
  virtual ChatLayout exchange(std::string_view system, const ChatExchange& exchange, bool first_turn) const = 0;
  // The special tokens (by text) that end a reply, besides the tokenizer's EOS.
  virtual std::vector<std::string> stop_specials() const = 0;
  // The text an earlier answer keeps in the history, when the template changes it (Qwen3 drops
  // the reasoning); nothing when the answer stays as it was.
  virtual std::optional<std::string> kept_answer(std::string_view answer) const {
    (void)answer;
    return std::nullopt;
  }
};

// A chat format bound to a tokenizer: the layouts as token ids.
class ChatTemplate {
 public:
  // Fails when the tokenizer lacks a special token the format uses, naming it (so that nothing
  // fails for that reason in the middle of a conversation). `tokenizer`
  // must outlive the template. `extra_stops` are further ids that end a reply (the
  // eos_token_id list of the model's generation_config.json).
  // `origin` says how the template was chosen, for the user.
  static StatusOr<std::unique_ptr<ChatTemplate>> create(std::unique_ptr<ChatFormat> format, const Tokenizer& tokenizer,
                                                        std::span<const int32_t> extra_stops = {},
                                                        std::string origin = "");

  std::string name() const { return format_->name(); }
  // How it was chosen ("identified Qwen2.5 ChatML in model/tokenizer_config.json").
  const std::string& origin() const { return origin_; }
  const ChatFormat& format() const { return *format_; }

  StatusOr<std::vector<int32_t>> open_turn(std::string_view system, std::string_view user, bool first_turn) const;
  const std::vector<int32_t>& close_reply() const { return close_; }
  // The tokens at which generation of a reply stops: the tokenizer's EOS ids, the format's
  // end-of-turn tokens, and the extra stops.
  const std::vector<int32_t>& stop_tokens() const { return stops_; }
  StatusOr<std::vector<int32_t>> encode_exchange(std::string_view system, const ChatExchange& exchange,
                                                 bool first_turn) const;
  // The ids an earlier reply holds in the history: the generated ids themselves, unless the
  // format changes the answer's text (then that text, encoded).
  StatusOr<std::vector<int32_t>> history_reply(std::span<const int32_t> reply) const;
  // A conversation given as text, ending with an open turn for the assistant to answer: the
  // reference encoding that a conversation's token history reproduces (see conversation.h).
  StatusOr<std::vector<int32_t>> encode_dialog(std::string_view system, std::span<const ChatExchange> exchanges,
                                               std::string_view user) const;

 private:
  ChatTemplate(std::unique_ptr<ChatFormat> format, const Tokenizer& tokenizer, std::string origin)
      : format_(std::move(format)), tokenizer_(tokenizer), origin_(std::move(origin)) {}
  StatusOr<int32_t> special_id(std::string_view text) const;
  StatusOr<std::vector<int32_t>> encode(const ChatLayout& layout) const;

  std::unique_ptr<ChatFormat> format_;
  const Tokenizer& tokenizer_;
  std::string origin_;
  std::vector<int32_t> close_;
  std::vector<int32_t> stops_;
};

// The layout of a conversation given as text (as ChatTemplate::encode_dialog encodes it).
ChatLayout dialog_layout(const ChatFormat& format, std::string_view system, std::span<const ChatExchange> exchanges,
                         std::string_view user);

// Text with leading and trailing whitespace removed, as the reference chat code does to every
// message (Python's str.strip() on ASCII whitespace, including \x1c-\x1f).
std::string_view strip_message(std::string_view text);

}  // namespace kuiper
