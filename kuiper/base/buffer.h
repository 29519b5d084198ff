// A contiguous block of device or host memory. Either it owns its bytes (taken from an
// Allocator and given back when the last reference goes) or it borrows them (a memory-mapped
// checkpoint) and keeps whatever owns them alive through `keep_alive`.
#pragma once

#include <cstddef>
#include <memory>

#include "kuiper/base/allocator.h"
#include "kuiper/base/status.h"
#include "kuiper/base/types.h"

namespace kuiper {

class Buffer {
 public:
  static StatusOr<std::shared_ptr<Buffer>> allocate(size_t bytes, Allocator& allocator);
  static std::shared_ptr<Buffer> borrow(void* data, size_t bytes, DeviceType device,
                                        std::shared_ptr<const void> keep_alive);

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  DeviceType device() const { return device_; }
  bool owns_memory() const { return allocator_ != nullptr; }

 private:
  Buffer(void* data, size_t bytes, DeviceType device, Allocator* allocator,
         std::shared_ptr<const void> keep_alive)
      : data_(data), size_(bytes), device_(device), allocator_(allocator),
        keep_alive_(std::move(keep_alive)) {}

  void* data_;
  size_t size_;
  DeviceType device_;
  Allocator* allocator_;                   // null when borrowed
  std::shared_ptr<const void> keep_alive_;  // owner of borrowed memory
};

}  // namespace kuiper
