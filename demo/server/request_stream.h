// The hand-over between the engine's thread and the HTTP handler thread that waits for one
// request: the engine's output callback appends to the stream (never blocking for long), the
// handler takes everything that arrived since it last looked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "kuiper/engine/engine.h"

namespace kuiper::server {

// The outputs of one or more engine steps, merged: their text, the usage of the latest, and the
// finish reason (and error) of the last one when it came.
struct StreamUpdate {
  bool arrived = false;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  Status error;
  int prompt_tokens = 0, cached_prompt_tokens = 0, completion_tokens = 0;
};

class RequestStream {
 public:
  // The callback to submit with; it keeps the stream alive for as long as the engine holds it.
  static OutputCallback feeder(std::shared_ptr<RequestStream> stream);

  void push(const RequestOutput& output);
  // What arrived since the last call, waiting up to `timeout` for something (arrived = false
  // when nothing came).
  StreamUpdate take(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  StreamUpdate pending_;
};

}  // namespace kuiper::server
