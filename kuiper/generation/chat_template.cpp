#include "kuiper/generation/chat_template.h"

#include <algorithm>

namespace kuiper {

std::string render_layout(const ChatLayout& layout) {
  std::string text;
  for (const ChatPiece& piece : layout) {
    if (piece.space_from_tokenizer) text += ' ';
    text += piece.text;
  }
  return text;
}

ChatLayout dialog_layout(const ChatFormat& format, std::string_view system, std::span<const ChatExchange> exchanges,
                         std::string_view user) {
  ChatLayout layout;
  for (size_t i = 0; i < exchanges.size(); ++i) {
    ChatLayout exchange = format.exchange(system, exchanges[i], i == 0);
    layout.insert(layout.end(), exchange.begin(), exchange.end());
  }
  ChatLayout open = format.open_turn(system, user, exchanges.empty());
  layout.insert(layout.end(), open.begin(), open.end());
  return layout;
}

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::create(std::unique_ptr<ChatFormat> format,
                                                             const Tokenizer& tokenizer,
                                                             std::span<const int32_t> extra_stops,
                                                             std::string origin) {
  std::unique_ptr<ChatTemplate> chat(new ChatTemplate(std::move(format), tokenizer, std::move(origin)));
  // Every special token the layouts use, found now rather than in the middle of a conversation.
  const ChatExchange probe{"u", "a"};
  for (const ChatPiece& piece : dialog_layout(*chat->format_, "s", std::span(&probe, 1), "u")) {
    if (piece.kind == ChatPiece::Kind::kSpecial) KUIPER_RETURN_IF_ERROR(chat->special_id(piece.text).status());
  }
  KUIPER_ASSIGN_OR_RETURN(chat->close_, chat->encode(chat->format_->close_reply()));

  std::vector<int32_t>& stops = chat->stops_;
  stops = tokenizer.eos_ids();
  for (const std::string& text : chat->format_->stop_specials()) {
    KUIPER_ASSIGN_OR_RETURN(const int32_t id, chat->special_id(text));
    stops.push_back(id);
  }
  for (const int32_t id : extra_stops) {
    if (id < 0 || id >= tokenizer.vocab_size()) {
      return invalid_argument("end-of-reply token id " + std::to_string(id) + " is outside the " +
                              tokenizer.kind() + " tokenizer's " + std::to_string(tokenizer.vocab_size()) + " tokens");
    }
    stops.push_back(id);
  }
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  return chat;
}

StatusOr<int32_t> ChatTemplate::special_id(std::string_view text) const {
  const auto id = tokenizer_.special_token(text);
  if (!id) {
    return invalid_argument("the " + name() + " chat template needs the special token " + std::string(text) +
                            ", which this " + tokenizer_.kind() + " tokenizer does not have");
  }
  return *id;
}

StatusOr<std::vector<int32_t>> ChatTemplate::encode(const ChatLayout& layout) const {
  std::vector<int32_t> ids;
  for (const ChatPiece& piece : layout) {
    switch (piece.kind) {
      case ChatPiece::Kind::kBos:
        ids.push_back(tokenizer_.bos_id());
        break;
      case ChatPiece::Kind::kEos:
        // The tokenizer's first end token is its EOS (LLaMA 3 vocabularies list <|eot_id|> after it).
        ids.push_back(tokenizer_.eos_ids().front());
        break;
      case ChatPiece::Kind::kSpecial: {
        KUIPER_ASSIGN_OR_RETURN(const int32_t id, special_id(piece.text));
        ids.push_back(id);
        break;
      }
      case ChatPiece::Kind::kText: {
        KUIPER_ASSIGN_OR_RETURN(auto encoded,
                                tokenizer_.encode(piece.text, {.add_bos = false, .allow_special = false}));
        ids.insert(ids.end(), encoded.begin(), encoded.end());
        break;
      }
    }
  }
  return ids;
}

StatusOr<std::vector<int32_t>> ChatTemplate::open_turn(std::string_view system, std::string_view user,
                                                       bool first_turn) const {
  return encode(format_->open_turn(system, user, first_turn));
}

StatusOr<std::vector<int32_t>> ChatTemplate::encode_exchange(std::string_view system, const ChatExchange& exchange,
                                                             bool first_turn) const {
  return encode(format_->exchange(system, exchange, first_turn));
}

StatusOr<std::vector<int32_t>> ChatTemplate::history_reply(std::span<const int32_t> reply) const {
  const std::optional<std::string> kept = format_->kept_answer(tokenizer_.decode(reply));
  if (!kept) return std::vector<int32_t>(reply.begin(), reply.end());
  return encode({text_piece(*kept)});
}

StatusOr<std::vector<int32_t>> ChatTemplate::encode_dialog(std::string_view system,
                                                           std::span<const ChatExchange> exchanges,
                                                           std::string_view user) const {
  return encode(dialog_layout(*format_, system, exchanges, user));
}

}  // namespace kuiper
