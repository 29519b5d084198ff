// GET /metrics: the engine's figures (requests running and waiting, tokens prefilled,
// generated and served from the prefix cache, KV blocks, tokens/s) and the server's responses
// by HTTP status, in Prometheus' text exposition format (version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "kuiper/engine/engine.h"

namespace kuiper::server {

// Responses sent, by HTTP status; thread-safe.
class ResponseCounter {
 public:
  void count(int http_status);
  std::map<int, uint64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<int, uint64_t> by_status_;
};

std::string render_metrics(const EngineMetrics& engine, const std::map<int, uint64_t>& responses_by_status);

}  // namespace kuiper::server
