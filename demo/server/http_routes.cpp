#include "http_routes.h"

#include "generation_handler.h"
#include "openai_response.h"

namespace kuiper::server {
namespace {

void send_json(httplib::Response& response, const nlohmann::json& body) {
  response.set_content(to_json_text(body), "application/json");
}

// Compares without stopping at the first difference, so that timing does not tell how much of
// a guessed key was right.
bool same_key(std::string_view a, std::string_view b) {
  unsigned char difference = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

bool authorized(const ServerContext& context, const httplib::Request& request) {
  if (context.api_key.empty()) return true;
  const std::string header = request.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return header.starts_with(kBearer) && same_key(std::string_view(header).substr(kBearer.size()), context.api_key);
}

// The error object for a status httplib or routing produced without a body.
ApiError error_for_status(int status, const httplib::Request& request) {
  switch (status) {
    case 404:
      return {404, "no such endpoint: " + request.method + " " + request.path, "invalid_request_error", "", "not_found"};
    case 413:
      return {413, "the request body exceeds " + std::to_string(kMaxRequestBytes) + " bytes", "invalid_request_error",
              "", "request_too_large"};
    default:
      return {status, "HTTP " + std::to_string(status) + " for " + request.method + " " + request.path,
              status >= 500 ? "server_error" : "invalid_request_error", "", ""};
  }
}

}  // namespace

void add_routes(httplib::Server& http, ServerContext& context) {
  http.set_payload_max_length(kMaxRequestBytes);
  http.set_pre_routing_handler([&context](const httplib::Request& request, httplib::Response& response) {
    if (!request.path.starts_with("/v1/") || authorized(context, request)) return httplib::Server::HandlerResponse::Unhandled;
    response.status = 401;
    send_json(response, error_body({401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                                    "invalid_request_error", "", "invalid_api_key"}));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.Post("/v1/completions", [&context](const httplib::Request& request, httplib::Response& response) {
    handle_generation(context, Endpoint::kCompletions, request, response);
  });
  http.Post("/v1/chat/completions", [&context](const httplib::Request& request, httplib::Response& response) {
    handle_generation(context, Endpoint::kChatCompletions, request, response);
  });
  http.Get("/v1/models", [&context](const httplib::Request&, httplib::Response& response) {
    send_json(response, model_list(context.model_id, context.started));
  });
  http.Get("/health", [&context](const httplib::Request&, httplib::Response& response) {
    if (context.shutting_down) response.status = 503;
    send_json(response, {{"status", context.shutting_down ? "shutting down" : "ok"}});
  });
  http.Get("/metrics", [&context](const httplib::Request&, httplib::Response& response) {
    response.set_content(render_metrics(context.engine.metrics(), context.responses.snapshot()),
                         "text/plain; version=0.0.4");
  });
  http.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;  // an error object a handler wrote
    const ApiError error = error_for_status(response.status, request);
    send_json(response, error_body(error));
  });
  http.set_logger([&context](const httplib::Request&, const httplib::Response& response) {
    context.responses.count(response.status);
  });
}

}  // namespace kuiper::server
