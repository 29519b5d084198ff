// Where memory comes from. Each device has one process-wide allocator; the CUDA one (built only
// with KUIPER_CUDA) keeps a caching pool so that nothing on the per-token path calls cudaMalloc.
#pragma once

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

// 64-byte aligned host memory (one cache line, and enough for every SIMD load).
Allocator& cpu_allocator();

}  // namespace kuiper
