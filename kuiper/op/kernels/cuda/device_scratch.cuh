// Grow-only device memory that a kernel wrapper keeps between calls (partial results,
// converted activations). It is taken from the caching pool the first time a size is needed
// and then reused, so a wrapper called with shapes it has seen before never allocates; the
// pointer it returns is stable, which lets a captured CUDA graph keep using it.
//
// Like the pool, it assumes one stream of work: two calls queued on different streams at once
// would share the memory.
#pragma once

#include <cstddef>
#include <mutex>

#include "kuiper/base/status.h"

namespace kuiper::op::cuda {

class DeviceScratch {
 public:
  // At least `bytes` on the current device. Call with the largest size first (warm-up) when a
  // graph is to be captured later: growing hands out a new pointer.
  StatusOr<void*> get(size_t bytes);

 private:
  static constexpr int kMaxDevices = 16;
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::mutex mutex_;
  Block blocks_[kMaxDevices];
};

}  // namespace kuiper::op::cuda
