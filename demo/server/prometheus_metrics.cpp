#include "prometheus_metrics.h"

#include <cstdio>

namespace kuiper::server {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char line[64];
  std::snprintf(line, sizeof(line), "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line +
         "\n";
}

}  // namespace

void ResponseCounter::count(int http_status) {
  std::lock_guard lock(mutex_);
  ++by_status_[http_status];
}

std::map<int, uint64_t> ResponseCounter::snapshot() const {
  std::lock_guard lock(mutex_);
  return by_status_;
}

std::string render_metrics(const EngineMetrics& m, const std::map<int, uint64_t>& responses_by_status) {
  std::string out;
  metric(out, "kuiper_requests_running", "gauge", "Requests the engine is running.", m.running);
  metric(out, "kuiper_requests_waiting", "gauge", "Requests queued for a place in the batch.", m.waiting);
  metric(out, "kuiper_requests_finished_total", "counter", "Requests that ran to their end.",
         static_cast<double>(m.requests_finished));
  metric(out, "kuiper_requests_cancelled_total", "counter", "Requests cancelled (client gone, shutdown).",
         static_cast<double>(m.requests_cancelled));
  metric(out, "kuiper_prompt_tokens_prefilled_total", "counter", "Prompt tokens run through the model.",
         static_cast<double>(m.prompt_tokens_prefilled));
  metric(out, "kuiper_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.",
         static_cast<double>(m.prompt_tokens_cached));
  metric(out, "kuiper_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.tokens_generated));
  metric(out, "kuiper_kv_blocks_used", "gauge", "KV cache blocks held by requests or the prefix cache.",
         m.kv_blocks_used);
  metric(out, "kuiper_kv_blocks_free", "gauge", "KV cache blocks free.", m.kv_blocks_free);
  metric(out, "kuiper_kv_blocks_total", "gauge", "KV cache blocks in the pool.", m.kv_blocks_total);
  metric(out, "kuiper_generated_tokens_per_second", "gauge", "Tokens generated per second over the last seconds.",
         m.generated_tokens_per_second);
  out += "# HELP kuiper_http_responses_total HTTP responses sent, by status.\n"
         "# TYPE kuiper_http_responses_total counter\n";
  for (const auto& [status, count] : responses_by_status) {
    out += "kuiper_http_responses_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(count) + "\n";
  }
  return out;
}

}  // namespace kuiper::server
