// An error as the OpenAI API reports it: an HTTP status and the body
// {"error": {"message", "type", "param", "code"}}. Every failure a client can cause or meet
// (bad JSON, a wrong field, a full queue, a missing key) becomes one of these.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kuiper/base/status.h"

namespace kuiper::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty = none
  std::string code;   // a machine-readable reason; empty = none
};

// A 400 invalid_request_error naming the field.
ApiError invalid_request(std::string message, std::string param = "", std::string code = "");

// The error for a Status from the engine or tokenizer: a full queue is 429, a request the
// context or the cache cannot hold is 400 (context_length_exceeded), other refusals of the
// request are 400, anything else is a 500 server_error.
ApiError api_error_from_status(const Status& status);

// {"error": {...}}, with null for an empty param or code.
nlohmann::json error_body(const ApiError& error);

}  // namespace kuiper::server
