#include "kuiper/generation/conversation.h"

#include <algorithm>
#include <cstddef>

namespace kuiper {

Conversation::Conversation(Session& session, const ChatTemplate& chat_template, std::string system, int max_reply)
    : session_(session), template_(chat_template), system_(std::move(system)), max_reply_(std::max(max_reply, 0)) {}

int Conversation::reply_reserve() const { return std::max(1, std::min(max_reply_, session_.context() / 4)); }

void Conversation::reset() {
  turns_.clear();
  session_.reset();
}

Status Conversation::append_history(size_t first, std::vector<int32_t>& ids) const {
  const std::vector<int32_t>& close = template_.close_reply();
  for (size_t i = first; i < turns_.size(); ++i) {
    KUIPER_ASSIGN_OR_RETURN(auto open, template_.open_turn(system_, turns_[i].user, i == first));
    ids.insert(ids.end(), open.begin(), open.end());
    KUIPER_ASSIGN_OR_RETURN(auto reply, template_.history_reply(turns_[i].reply));
    ids.insert(ids.end(), reply.begin(), reply.end());
    ids.insert(ids.end(), close.begin(), close.end());
  }
  return ok_status();
}

StatusOr<std::vector<int32_t>> Conversation::history_tokens() const {
  std::vector<int32_t> ids;
  KUIPER_RETURN_IF_ERROR(append_history(0, ids));
  return ids;
}

StatusOr<std::vector<int32_t>> Conversation::sequence(size_t first, std::string_view user) const {
  std::vector<int32_t> ids;
  KUIPER_RETURN_IF_ERROR(append_history(first, ids));
  KUIPER_ASSIGN_OR_RETURN(auto open, template_.open_turn(system_, user, first == turns_.size()));
  ids.insert(ids.end(), open.begin(), open.end());
  return ids;
}

StatusOr<TurnStats> Conversation::reply(std::string_view user, const PieceCallback& on_piece) {
  const size_t context = static_cast<size_t>(session_.context());
  const size_t reserve = static_cast<size_t>(reply_reserve());

  KUIPER_ASSIGN_OR_RETURN(auto alone, template_.open_turn(system_, user, /*first_turn=*/true));
  if (alone.size() + reserve > context) {
    return out_of_range("this message needs " + std::to_string(alone.size()) + " tokens" +
                        (system_.empty() ? "" : " with the system prompt") + ", plus " + std::to_string(reserve) +
                        " kept for the reply, but the context holds " + std::to_string(context) +
                        " (shorten the message, or raise --context)");
  }
  // Drop the oldest turns until the new one fits; with all of them gone it is `alone`, which fits.
  size_t dropped = 0;
  KUIPER_ASSIGN_OR_RETURN(auto tokens, sequence(dropped, user));
  while (tokens.size() + reserve > context) {
    ++dropped;
    KUIPER_ASSIGN_OR_RETURN(tokens, sequence(dropped, user));
  }

  // Keep what the cache already holds of this sequence; at least the last token is run again,
  // because its logits pick the first token of the reply.
  const std::vector<int32_t>& cached = session_.tokens();
  const size_t limit = std::min(cached.size(), tokens.size() - 1);
  const size_t common = std::mismatch(cached.begin(), cached.begin() + limit, tokens.begin()).first - cached.begin();
  session_.truncate(static_cast<int>(common));

  GenerationOptions options;
  options.max_new_tokens = static_cast<int>(std::min(static_cast<size_t>(max_reply_), context - tokens.size()));
  options.stop_tokens = template_.stop_tokens();
  const std::span<const int32_t> fresh = std::span(tokens).subspan(common);
  TurnStats stats;
  KUIPER_ASSIGN_OR_RETURN(stats.generation, session_.generate(fresh, options, on_piece));

  // Only a turn that ran changes the history: a failed one leaves the turns as they were (the
  // cache is reconciled with them at the next turn).
  turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(dropped));
  const std::vector<int32_t>& held = session_.tokens();
  turns_.push_back({std::string(user), std::vector<int32_t>(held.begin() + static_cast<std::ptrdiff_t>(tokens.size()),
                                                            held.end())});
  stats.prefilled_tokens = static_cast<int>(fresh.size());
  stats.dropped_turns = static_cast<int>(dropped);
  stats.context_tokens = session_.position();
  return stats;
}

}  // namespace kuiper
