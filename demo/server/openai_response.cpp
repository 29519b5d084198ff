#include "openai_response.h"

#include <atomic>
#include <chrono>
#include <random>

namespace kuiper::server {
namespace {

using nlohmann::json;

bool is_chat(const ResponseHeader& h) { return h.endpoint == Endpoint::kChatCompletions; }

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

json object_start(const ResponseHeader& h, const char* completion_object, const char* chat_object) {
  return {{"id", h.id}, {"object", is_chat(h) ? chat_object : completion_object}, {"created", h.created},
          {"model", h.model}};
}

json chunk_with_choice(const ResponseHeader& h, json choice) {
  json chunk = object_start(h, "text_completion", "chat.completion.chunk");
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

}  // namespace

ResponseHeader make_response_header(Endpoint endpoint, std::string model) {
  // Unique within the process (counter) and unlikely to repeat across restarts (random start).
  static std::atomic<uint64_t> counter{std::random_device{}()};
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(counter.fetch_add(1)));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {endpoint, std::string(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") + suffix,
          std::chrono::duration_cast<std::chrono::seconds>(now).count(), std::move(model)};
}

const char* openai_finish_reason(FinishReason reason) { return reason == FinishReason::kLength ? "length" : "stop"; }

json completion_object(const ResponseHeader& h, const std::string& text, FinishReason finish, const Usage& usage) {
  json object = object_start(h, "text_completion", "chat.completion");
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(finish)}};
  if (is_chat(h)) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  object["choices"] = json::array({std::move(choice)});
  object["usage"] = usage_json(usage);
  return object;
}

json completion_chunk(const ResponseHeader& h, std::string_view text, bool first) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (is_chat(h)) {
    choice["delta"] = {{"content", text}};
    if (first) choice["delta"]["role"] = "assistant";
  } else {
    choice["text"] = text;
  }
  return chunk_with_choice(h, std::move(choice));
}

json final_chunk(const ResponseHeader& h, FinishReason finish) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(finish)}};
  if (is_chat(h)) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  return chunk_with_choice(h, std::move(choice));
}

json usage_chunk(const ResponseHeader& h, const Usage& usage) {
  json chunk = object_start(h, "text_completion", "chat.completion.chunk");
  chunk["choices"] = json::array();
  chunk["usage"] = usage_json(usage);
  return chunk;
}

json model_list(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "kuiper"}}})}};
}

std::string to_json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& value) { return "data: " + to_json_text(value) + "\n\n"; }

}  // namespace kuiper::server
