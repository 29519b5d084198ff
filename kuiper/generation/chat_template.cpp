#include "kuiper/generation/chat_template.h"

namespace kuiper {

StatusOr<std::vector<int32_t>> ChatTemplate::encode_dialog(std::string_view system,
                                                           std::span<const ChatExchange> exchanges,
                                                           std::string_view user) const {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < exchanges.size(); ++i) {
    KUIPER_ASSIGN_OR_RETURN(auto exchange, encode_exchange(system, exchanges[i], i == 0));
    ids.insert(ids.end(), exchange.begin(), exchange.end());
  }
  KUIPER_ASSIGN_OR_RETURN(auto open, open_turn(system, user, exchanges.empty()));
  ids.insert(ids.end(), open.begin(), open.end());
  return ids;
}

}  // namespace kuiper
