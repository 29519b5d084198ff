// Reading a request body of POST /v1/completions or /v1/chat/completions into what the engine
// needs, checking every field the OpenAI API reference defines: wrong types, values out of
// range and features kuiper does not offer (n > 1, logprobs, tools, ...) are refused with an
// error naming the field. Fields the reference defines only for bookkeeping (user, metadata,
// store) and fields it does not define are ignored, as OpenAI-compatible servers do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api_error.h"
#include "kuiper/engine/engine.h"

namespace kuiper::server {

enum class Endpoint { kCompletions, kChatCompletions };

struct ChatMessage {
  std::string role;  // "system" (also given as "developer"), "user" or "assistant"
  std::string content;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt;                       // completions: text ...
  std::optional<std::vector<int32_t>> prompt_ids;  // ... or token ids
  std::vector<ChatMessage> messages;        // chat completions
  bool stream = false;
  bool include_usage = false;               // stream_options.include_usage
  std::optional<int64_t> max_tokens;        // absent: the endpoint's default (see resolve_max_tokens)
  std::optional<uint64_t> seed;             // absent: a random seed
  SamplingParams sampling;                  // max_tokens and seed are set by resolve_max_tokens / the caller
};

// Parses and checks a request body; the error says which field is wrong and why.
std::variant<GenerationRequest, ApiError> parse_generation_request(std::string_view body, Endpoint endpoint);

// The number of tokens to generate: max_tokens when given (an error when the prompt and it
// exceed the context, as OpenAI answers), else 16 for completions (OpenAI's default) and the
// rest of the context for chat.
std::variant<int, ApiError> resolve_max_tokens(const GenerationRequest& request, int prompt_tokens, int context);

}  // namespace kuiper::server
