// Where memory comes from. Each device has one process-wide allocator; the CUDA one (built only
// with KUIPER_CUDA) keeps a caching pool so that nothing on the per-token path calls cudaMalloc.
#pragma once

#include <atomic>
#include <cstddef>

#include "kuiper/base/status.h"
#include "kuiper/base/types.h"

namespace kuiper {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DeviceType device() const = 0;
  virtual StatusOr<void*> allocate(size_t bytes) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
  // High-water mark of bytes handed out (CPU) or held from the driver (CUDA), for reports.
  virtual size_t peak_bytes() const = 0;
};

// Bytes an allocator has handed out and their high-water mark (peak_bytes), from any thread.
class ByteCount {
 public:
  void add(size_t bytes) {
    const size_t now = in_use_.fetch_add(bytes) + bytes;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
  }
  void remove(size_t bytes) { in_use_.fetch_sub(bytes); }
  size_t peak() const { return peak_.load(); }

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

// 64-byte aligned host memory (one cache line, and enough for every SIMD load).
Allocator& cpu_allocator();

}  // namespace kuiper
