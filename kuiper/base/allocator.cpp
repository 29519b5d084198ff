#include "kuiper/base/allocator.h"

#include <cstdlib>
#include <new>

namespace kuiper {
namespace {

class CpuAllocator final : public Allocator {
 public:
  DeviceType device() const override { return DeviceType::kCPU; }

  StatusOr<void*> allocate(size_t bytes) override {
    if (bytes == 0) return invalid_argument("cannot allocate 0 bytes");
    constexpr size_t kAlign = 64;
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;  // aligned_alloc needs a multiple
    void* ptr = std::aligned_alloc(kAlign, rounded);
    if (ptr == nullptr) {
      return resource_exhausted("host allocation of " + std::to_string(bytes) + " bytes failed");
    }
    count_.add(bytes);
    return ptr;
  }

  void release(void* ptr, size_t bytes) override {
    std::free(ptr);
    count_.remove(bytes);
  }

  size_t peak_bytes() const override { return count_.peak(); }

 private:
  ByteCount count_;
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace kuiper
