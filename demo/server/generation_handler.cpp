#include "generation_handler.h"

#include <chrono>
#include <memory>
#include <random>

#include "openai_response.h"
#include "prompt_tokens.h"
#include "request_stream.h"

namespace kuiper::server {
namespace {

using namespace std::chrono_literals;

// How long a handler waits for the engine before it looks again: for a shutdown, and (streams)
// to write a keep-alive comment that finds out whether the client is still there.
constexpr auto kPollInterval = 500ms;
// Polls without output during a shutdown after which a request is abandoned.
constexpr int kShutdownPolls = 10;

void send_error(httplib::Response& response, const ApiError& error) {
  response.status = error.http_status;
  response.set_content(to_json_text(error_body(error)), "application/json");
}

// Why a request that did not finish normally ended.
ApiError ended_error(const StreamUpdate& update) {
  if (update.finish == FinishReason::kError) return ApiError{500, update.error.message(), "server_error", "", ""};
  return ApiError{503, "the request was cancelled: the server is shutting down", "server_error", "", "cancelled"};
}

bool ended_normally(FinishReason finish) { return finish == FinishReason::kStop || finish == FinishReason::kLength; }

// A chat reply starts at its first non-blank character (the template strips every message, and
// a reply often begins with the space of its first word's token).
class ReplyStart {
 public:
  explicit ReplyStart(bool active) : skipping_(active) {}
  std::string_view operator()(std::string_view text) {
    if (!skipping_) return text;
    const size_t start = text.find_first_not_of(" \t\r\n");
    if (start == std::string_view::npos) return {};
    skipping_ = false;
    return text.substr(start);
  }

 private:
  bool skipping_;
};

// Counts a generation request as in flight for as long as it lives.
class InFlight {
 public:
  explicit InFlight(ServerContext& context) : context_(context) { ++context_.requests_in_flight; }
  ~InFlight() { --context_.requests_in_flight; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  ServerContext& context_;
};

// A submitted request, from the handler's side.
struct Submitted {
  RequestId id = 0;
  std::shared_ptr<RequestStream> stream;
  ResponseHeader header;
  bool chat = false;
};

// Takes the next update; during a shutdown, a request that gets nothing is cancelled and, after
// kShutdownPolls, given up with an update that says so.
StreamUpdate next_update(ServerContext& context, const Submitted& submitted, int& idle_shutdown_polls) {
  StreamUpdate update = submitted.stream->take(kPollInterval);
  if (update.arrived || !context.shutting_down) return update;
  context.engine.cancel(submitted.id);
  if (++idle_shutdown_polls >= kShutdownPolls) update.finish = FinishReason::kCancelled;
  return update;
}

Usage usage_of(const StreamUpdate& update) {
  return {update.prompt_tokens, update.cached_prompt_tokens, update.completion_tokens};
}

void answer_whole(ServerContext& context, const Submitted& submitted, httplib::Response& response) {
  std::string text;
  Usage usage;
  ReplyStart reply_start(submitted.chat);
  int idle_shutdown_polls = 0;
  for (;;) {
    StreamUpdate update = next_update(context, submitted, idle_shutdown_polls);
    if (update.arrived) usage = usage_of(update);
    text += reply_start(update.text);
    if (update.finish == FinishReason::kNone) continue;
    if (!ended_normally(update.finish)) return send_error(response, ended_error(update));
    response.set_content(to_json_text(completion_object(submitted.header, text, update.finish, usage)),
                         "application/json");
    return;
  }
}

// The server-sent events of one streaming request, written by httplib's chunked content
// provider on the handler's thread after the handler returned.
class EventStream {
 public:
  EventStream(ServerContext& context, Submitted submitted, bool include_usage)
      : context_(context), submitted_(std::move(submitted)), include_usage_(include_usage),
        reply_start_(submitted_.chat) {}

  // Writes what the engine produced since the last call (or a keep-alive comment); false when
  // the client is gone.
  bool write_next(httplib::DataSink& sink) {
    StreamUpdate update = next_update(context_, submitted_, idle_shutdown_polls_);
    if (update.arrived) usage_ = usage_of(update);
    std::string events;
    if (const std::string_view text = reply_start_(update.text); !text.empty()) {
      events += sse_event(completion_chunk(submitted_.header, text, first_));
      first_ = false;
    }
    if (update.finish != FinishReason::kNone) {
      finished_ = true;
      if (ended_normally(update.finish)) {
        events += sse_event(final_chunk(submitted_.header, update.finish));
        if (include_usage_) events += sse_event(usage_chunk(submitted_.header, usage_));
      } else {
        events += sse_event(error_body(ended_error(update)));
      }
      events += kSseDone;
    }
    if (events.empty()) events = kSseKeepAlive;
    if (!sink.write(events.data(), events.size())) return false;
    if (finished_) sink.done();
    return true;
  }

  // httplib is done with the response: a request that did not finish (client gone, write
  // timeout) is cancelled so that its blocks return to the pool.
  void release() {
    if (!finished_) context_.engine.cancel(submitted_.id);
  }

 private:
  ServerContext& context_;
  Submitted submitted_;
  bool include_usage_;
  ReplyStart reply_start_;
  InFlight in_flight_{context_};
  Usage usage_;
  bool first_ = true;
  bool finished_ = false;
  int idle_shutdown_polls_ = 0;
};

}  // namespace

void handle_generation(ServerContext& context, Endpoint endpoint, const httplib::Request& http_request,
                       httplib::Response& response) {
  auto parsed = parse_generation_request(http_request.body, endpoint);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(response, *error);
  GenerationRequest& request = std::get<GenerationRequest>(parsed);
  if (request.model != context.model_id) {
    return send_error(response, ApiError{404, "the model '" + request.model + "' does not exist; this server has '" +
                                                  context.model_id + "'",
                                         "invalid_request_error", "model", "model_not_found"});
  }
  auto prompt = prompt_tokens(request, context.engine.tokenizer(), context.chat_template);
  if (auto* error = std::get_if<ApiError>(&prompt)) return send_error(response, *error);
  std::vector<int32_t>& ids = std::get<std::vector<int32_t>>(prompt);
  auto max_tokens = resolve_max_tokens(request, static_cast<int>(ids.size()), context.engine.context());
  if (auto* error = std::get_if<ApiError>(&max_tokens)) return send_error(response, *error);
  request.sampling.max_tokens = std::get<int>(max_tokens);
  request.sampling.seed = request.seed ? *request.seed : std::random_device{}();
  if (endpoint == Endpoint::kChatCompletions) request.sampling.stop_token_ids = context.chat_template.stop_tokens();
  if (Status valid = validate(request.sampling); !valid.ok()) {
    return send_error(response, api_error_from_status(valid));
  }
  if (context.shutting_down) {
    return send_error(response, ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"});
  }

  Submitted submitted{0, std::make_shared<RequestStream>(), make_response_header(endpoint, context.model_id),
                      endpoint == Endpoint::kChatCompletions};
  auto id = context.engine.submit(std::move(ids), request.sampling, RequestStream::feeder(submitted.stream));
  if (!id.ok()) return send_error(response, api_error_from_status(id.status()));
  submitted.id = *id;

  if (!request.stream) {
    InFlight in_flight(context);
    return answer_whole(context, submitted, response);
  }
  auto events = std::make_shared<EventStream>(context, std::move(submitted), request.include_usage);
  response.set_header("Cache-Control", "no-cache");
  response.set_chunked_content_provider(
      "text/event-stream", [events](size_t, httplib::DataSink& sink) { return events->write_next(sink); },
      [events](bool) { events->release(); });
}

}  // namespace kuiper::server
