// What every HTTP handler of kuiper_server shares: the engine, the chat template, the name the
// model is served under, the API key, and the server's own state (shutting down, requests in
// flight, responses sent).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "kuiper/engine/engine.h"
#include "kuiper/generation/chat_template.h"
#include "prometheus_metrics.h"

namespace kuiper::server {

struct ServerContext {
  ServerContext(Engine& engine, const ChatTemplate& chat_template, std::string model_id, std::string api_key,
                int64_t started)
      : engine(engine), chat_template(chat_template), model_id(std::move(model_id)), api_key(std::move(api_key)),
        started(started) {}

  Engine& engine;
  const ChatTemplate& chat_template;
  std::string model_id;
  std::string api_key;      // empty: no key required
  int64_t started;          // Unix seconds, the model's "created"

  std::atomic<bool> shutting_down{false};  // new requests are refused, waiting ones give up
  std::atomic<int> requests_in_flight{0};  // generation requests between submit and their end
  ResponseCounter responses;
};

}  // namespace kuiper::server
