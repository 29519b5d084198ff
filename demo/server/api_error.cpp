#include "api_error.h"

namespace kuiper::server {

ApiError invalid_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError api_error_from_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kResourceExhausted:
      return ApiError{429, status.message(), "rate_limit_error", "", "queue_full"};
    case StatusCode::kOutOfRange:
      return invalid_request(status.message(), "", "context_length_exceeded");
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      return invalid_request(status.message());
    default:
      return ApiError{500, status.message(), "server_error", "", ""};
  }
}

nlohmann::json error_body(const ApiError& error) {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error",
           {{"message", error.message}, {"type", error.type}, {"param", or_null(error.param)},
            {"code", or_null(error.code)}}}};
}

}  // namespace kuiper::server
