#include "request_stream.h"

namespace kuiper::server {

OutputCallback RequestStream::feeder(std::shared_ptr<RequestStream> stream) {
  return [stream = std::move(stream)](const RequestOutput& output) { stream->push(output); };
}

void RequestStream::push(const RequestOutput& output) {
  {
    std::lock_guard lock(mutex_);
    pending_.arrived = true;
    pending_.text += output.text;
    pending_.prompt_tokens = output.prompt_tokens;
    pending_.cached_prompt_tokens = output.cached_prompt_tokens;
    pending_.completion_tokens = output.completion_tokens;
    if (output.finish != FinishReason::kNone) {
      pending_.finish = output.finish;
      pending_.error = output.error;
    }
  }
  arrived_.notify_one();
}

StreamUpdate RequestStream::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  arrived_.wait_for(lock, timeout, [this] { return pending_.arrived; });
  StreamUpdate update = std::move(pending_);
  pending_ = StreamUpdate{};
  return update;
}

}  // namespace kuiper::server
