// The JSON objects kuiper answers with, shaped as OpenAI's API reference gives them:
// text_completion / chat.completion (non-streaming, with usage), their streamed chunks, the
// model list, and the server-sent-events framing of a stream.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "openai_request.h"

namespace kuiper::server {

struct Usage {
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;
  int completion_tokens = 0;
};

// What every object and chunk of one response repeats.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;        // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;   // Unix seconds
  std::string model;
};

// A header with a fresh id and the current time.
ResponseHeader make_response_header(Endpoint endpoint, std::string model);

// The OpenAI finish_reason for an engine's ("stop" or "length").
const char* openai_finish_reason(FinishReason reason);

// The whole answer of a non-streaming request.
nlohmann::json completion_object(const ResponseHeader& header, const std::string& text, FinishReason finish,
                                 const Usage& usage);

// One streamed chunk: a text delta (chat: the first chunk also carries role "assistant"), or the
// last one with the finish reason and an empty delta.
nlohmann::json completion_chunk(const ResponseHeader& header, std::string_view text, bool first);
nlohmann::json final_chunk(const ResponseHeader& header, FinishReason finish);
// The chunk stream_options.include_usage asks for after the last: no choices, the usage.
nlohmann::json usage_chunk(const ResponseHeader& header, const Usage& usage);

// GET /v1/models.
nlohmann::json model_list(const std::string& model, int64_t created);

// Text a model produced may hold bytes that are not UTF-8 (a byte-fallback token on its own):
// they become U+FFFD rather than failing the response.
std::string to_json_text(const nlohmann::json& value);

// "data: <json>\n\n" and the stream's end "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& value);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// A comment line, ignored by clients: written while a request waits, so that a client that
// went away is noticed by the failed write.
inline constexpr std::string_view kSseKeepAlive = ": waiting\n\n";

}  // namespace kuiper::server
