#include "prompt_tokens.h"

#include <span>

namespace kuiper::server {
namespace {

std::variant<std::vector<int32_t>, ApiError> chat_tokens(std::span<const ChatMessage> messages,
                                                         const ChatTemplate& chat_template) {
  std::string_view system;
  if (messages.front().role == "system") {
    system = messages.front().content;
    messages = messages.subspan(1);
  }
  // The template knows exchanges (user, assistant) and a last user message.
  if (messages.empty() || messages.size() % 2 == 0) {
    return invalid_request("messages must end with a user message, after an optional system message and "
                           "alternating user and assistant messages",
                           "messages");
  }
  std::vector<ChatExchange> exchanges;
  for (size_t i = 0; i < messages.size(); ++i) {
    const char* expected = i % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != expected) {
      return invalid_request("messages: message " + std::to_string(i + (system.empty() ? 0 : 1)) + " is '" +
                                 messages[i].role + "' where '" + expected +
                                 "' was expected (after an optional system message, user and assistant "
                                 "alternate, starting and ending with user)",
                             "messages");
    }
    if (i % 2 == 1) exchanges.push_back({messages[i - 1].content, messages[i].content});
  }
  auto ids = chat_template.encode_dialog(system, exchanges, messages.back().content);
  if (!ids.ok()) return api_error_from_status(ids.status());
  return std::move(ids).value();
}

}  // namespace

std::variant<std::vector<int32_t>, ApiError> prompt_tokens(const GenerationRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const ChatTemplate& chat_template) {
  if (request.endpoint == Endpoint::kChatCompletions) return chat_tokens(request.messages, chat_template);
  if (request.prompt_ids) {
    for (int32_t id : *request.prompt_ids) {
      if (id >= tokenizer.vocab_size()) {
        return invalid_request("prompt: token id " + std::to_string(id) + " is not below the vocabulary size " +
                                   std::to_string(tokenizer.vocab_size()),
                               "prompt");
      }
    }
    return *request.prompt_ids;
  }
  auto ids = tokenizer.encode(request.prompt, {.add_bos = true});
  if (!ids.ok()) return api_error_from_status(ids.status());
  return std::move(ids).value();
}

}  // namespace kuiper::server
