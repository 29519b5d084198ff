#include "openai_request.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace kuiper::server {
namespace {

using nlohmann::json;

// The field's value, or nullptr when it is absent or null (the API treats both as "default").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> read_bool(const json& body, const char* name, bool& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return invalid_request(std::string(name) + " must be a boolean", name);
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_number(const json& body, const char* name, double low, double high, float& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return invalid_request(std::string(name) + " must be a number", name);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < low || x > high) {
    return invalid_request(std::string(name) + " is " + v->dump() + ", it must be in [" + json(low).dump() + ", " +
                               json(high).dump() + "]",
                           name);
  }
  out = static_cast<float>(x);
  return std::nullopt;
}

// Integers beyond int64 (JSON allows them; nlohmann keeps them as uint64) read as int64's max.
std::optional<ApiError> read_integer(const json& body, const char* name, std::optional<int64_t>& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return invalid_request(std::string(name) + " must be an integer", name);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    out = std::numeric_limits<int64_t>::max();
  } else {
    out = v->get<int64_t>();
  }
  return std::nullopt;
}

// A field kuiper does not implement is accepted only with the value that means "off".
std::optional<ApiError> refuse_unless(const json& body, const char* name, bool (*is_off)(const json&),
                                      const char* what) {
  const json* v = field(body, name);
  if (v && !is_off(*v)) return invalid_request(std::string(name) + ": " + what + " is not supported", name);
  return std::nullopt;
}

bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_one(const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }
bool is_zero(const json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }
bool is_empty(const json& v) { return (v.is_object() || v.is_array() || v.is_string()) && v.empty(); }
bool is_text_format(const json& v) { return v.is_object() && v.value("type", json()) == "text"; }
bool is_no_tool(const json& v) { return v == "none" || v == "auto"; }

std::optional<ApiError> read_stop(const json& body, std::vector<std::string>& out) {
  const json* v = field(body, "stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    if (!v->get_ref<const std::string&>().empty()) out.push_back(v->get<std::string>());
    return std::nullopt;
  }
  constexpr size_t kMaxStops = 4;  // OpenAI's limit
  if (!v->is_array() || v->size() > kMaxStops) {
    return invalid_request("stop must be a string or a list of at most 4 strings", "stop");
  }
  for (const json& s : *v) {
    if (!s.is_string() || s.get_ref<const std::string&>().empty()) {
      return invalid_request("stop must hold non-empty strings", "stop");
    }
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> read_sampling(const json& body, GenerationRequest& request) {
  SamplingParams& s = request.sampling;
  std::optional<int64_t> top_k, max_completion_tokens, seed;
  for (auto error : {read_number(body, "temperature", 0, 2, s.temperature),
                     read_number(body, "top_p", 0, 1, s.top_p),
                     read_integer(body, "top_k", top_k),
                     read_number(body, "min_p", 0, 1, s.min_p),
                     read_number(body, "presence_penalty", -2, 2, s.presence_penalty),
                     read_number(body, "frequency_penalty", -2, 2, s.frequency_penalty),
                     read_number(body, "repetition_penalty", 0, 10, s.repetition_penalty),
                     read_integer(body, "seed", seed),
                     read_integer(body, "max_tokens", request.max_tokens),
                     read_integer(body, "max_completion_tokens", max_completion_tokens),
                     read_stop(body, s.stop),
                     read_bool(body, "ignore_eos", s.ignore_eos)}) {
    if (error) return error;
  }
  if (top_k) {
    if (*top_k < 0) return invalid_request("top_k must be >= 0 (0 = off)", "top_k");
    s.top_k = static_cast<int>(std::min<int64_t>(*top_k, std::numeric_limits<int>::max()));
  }
  if (s.top_p == 0) return invalid_request("top_p must be > 0", "top_p");
  if (s.repetition_penalty == 0) return invalid_request("repetition_penalty must be > 0", "repetition_penalty");
  if (seed) request.seed = static_cast<uint64_t>(*seed);
  if (max_completion_tokens) request.max_tokens = max_completion_tokens;  // the newer name wins
  if (request.max_tokens && *request.max_tokens < 1) {
    const char* name = max_completion_tokens ? "max_completion_tokens" : "max_tokens";
    return invalid_request(std::string(name) + " is " + std::to_string(*request.max_tokens) + ", it must be >= 1",
                           name);
  }
  return std::nullopt;
}

std::optional<ApiError> read_stream(const json& body, GenerationRequest& request) {
  if (auto error = read_bool(body, "stream", request.stream)) return error;
  const json* options = field(body, "stream_options");
  if (!options) return std::nullopt;
  if (!options->is_object()) return invalid_request("stream_options must be an object", "stream_options");
  if (!request.stream) return invalid_request("stream_options is only allowed with stream: true", "stream_options");
  return read_bool(*options, "include_usage", request.include_usage);
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts.
std::optional<ApiError> read_content(const json& message, std::string& out) {
  const json* content = field(message, "content");
  if (content && content->is_string()) {
    out = content->get<std::string>();
    return std::nullopt;
  }
  if (content && content->is_array()) {
    for (const json& part : *content) {
      if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return invalid_request("messages: only text content parts are supported", "messages");
      }
      out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return invalid_request("messages: content must be a string or a list of text parts", "messages");
}

std::optional<ApiError> read_messages(const json& body, std::vector<ChatMessage>& out) {
  const json* messages = field(body, "messages");
  if (!messages) return invalid_request("messages is required", "messages");
  if (!messages->is_array() || messages->empty()) {
    return invalid_request("messages must be a non-empty list", "messages");
  }
  for (const json& m : *messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return invalid_request("messages: each message must be an object with a string role", "messages");
    }
    ChatMessage message{m["role"].get<std::string>(), ""};
    if (message.role == "developer") message.role = "system";
    if (message.role != "system" && message.role != "user" && message.role != "assistant") {
      return invalid_request("messages: role '" + message.role + "' is not supported (system, user, assistant)",
                             "messages");
    }
    if (auto error = read_content(m, message.content)) return error;
    out.push_back(std::move(message));
  }
  return std::nullopt;
}

bool is_token_list(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v) {
    if (!t.is_number_integer()) return false;
  }
  return true;
}

// A prompt is a string or a token list; a list of one of either is the same prompt; a list of
// several is several prompts, which (like n > 1) kuiper does not serve in one request.
std::optional<ApiError> read_prompt(const json& body, GenerationRequest& request) {
  const json* prompt = field(body, "prompt");
  if (!prompt) return invalid_request("prompt is required", "prompt");
  const json* single = prompt;
  if (prompt->is_array() && prompt->size() == 1 && !prompt->front().is_number()) single = &prompt->front();
  if (single->is_string()) {
    request.prompt = single->get<std::string>();
    return std::nullopt;
  }
  if (is_token_list(*single)) {
    std::vector<int32_t> ids;
    for (const json& t : *single) {
      const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT32_MAX) ? -1 : t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return invalid_request("prompt: token id " + t.dump() + " is out of range", "prompt");
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    request.prompt_ids = std::move(ids);
    return std::nullopt;
  }
  if (prompt->is_array() && prompt->size() > 1) {
    return invalid_request("prompt: only one prompt per request is supported", "prompt");
  }
  return invalid_request("prompt must be a string or a list of token ids", "prompt");
}

std::optional<ApiError> read_unsupported(const json& body, Endpoint endpoint) {
  std::vector<std::optional<ApiError>> errors = {
      refuse_unless(body, "n", is_one, "n other than 1"),
      refuse_unless(body, "logit_bias", is_empty, "logit_bias"),
  };
  if (endpoint == Endpoint::kChatCompletions) {
    errors.push_back(refuse_unless(body, "logprobs", is_false, "logprobs"));
    errors.push_back(refuse_unless(body, "top_logprobs", is_zero, "top_logprobs"));
    errors.push_back(refuse_unless(body, "tools", is_empty, "tools"));
    errors.push_back(refuse_unless(body, "functions", is_empty, "functions"));
    errors.push_back(refuse_unless(body, "tool_choice", is_no_tool, "tool_choice"));
    errors.push_back(refuse_unless(body, "response_format", is_text_format, "a response_format other than text"));
  } else {
    errors.push_back(refuse_unless(body, "logprobs", is_zero, "logprobs"));
    errors.push_back(refuse_unless(body, "echo", is_false, "echo"));
    errors.push_back(refuse_unless(body, "best_of", is_one, "best_of other than 1"));
    errors.push_back(refuse_unless(body, "suffix", is_empty, "suffix"));
  }
  for (auto& error : errors) {
    if (error) return error;
  }
  return std::nullopt;
}

}  // namespace

std::variant<GenerationRequest, ApiError> parse_generation_request(std::string_view body_text, Endpoint endpoint) {
  // Invalid UTF-8 inside a string is a parse error too (nlohmann checks it).
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return invalid_request("the request body is not valid JSON (UTF-8)");
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");

  GenerationRequest request;
  request.endpoint = endpoint;
  const json* model = field(body, "model");
  if (!model || !model->is_string()) return invalid_request("model must be a string", "model");
  request.model = model->get<std::string>();
  auto error = endpoint == Endpoint::kChatCompletions ? read_messages(body, request.messages)
                                                      : read_prompt(body, request);
  if (!error) error = read_unsupported(body, endpoint);
  if (!error) error = read_stream(body, request);
  if (!error) error = read_sampling(body, request);
  if (error) return *error;
  return request;
}

std::variant<int, ApiError> resolve_max_tokens(const GenerationRequest& request, int prompt_tokens, int context) {
  const int room = context - prompt_tokens;
  if (room < 1) {
    return invalid_request("the prompt is " + std::to_string(prompt_tokens) + " tokens, the context holds " +
                               std::to_string(context) + " (and the reply needs at least one more)",
                           request.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt",
                           "context_length_exceeded");
  }
  if (!request.max_tokens) {
    constexpr int kCompletionsDefault = 16;
    return request.endpoint == Endpoint::kCompletions ? std::min(kCompletionsDefault, room) : room;
  }
  if (*request.max_tokens > room) {
    return invalid_request("the context holds " + std::to_string(context) + " tokens, the prompt is " +
                               std::to_string(prompt_tokens) + " tokens and max_tokens asks for " +
                               std::to_string(*request.max_tokens) + " more",
                           "max_tokens", "context_length_exceeded");
  }
  return static_cast<int>(*request.max_tokens);
}

}  // namespace kuiper::server
