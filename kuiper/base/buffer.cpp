#include "kuiper/base/buffer.h"

namespace kuiper {

StatusOr<std::shared_ptr<Buffer>> Buffer::allocate(size_t bytes, Allocator& allocator) {
  KUIPER_ASSIGN_OR_RETURN(void* data, allocator.allocate(bytes));
  return std::shared_ptr<Buffer>(new Buffer(data, bytes, allocator.device(), &allocator, nullptr));
}

std::shared_ptr<Buffer> Buffer::borrow(void* data, size_t bytes, DeviceType device,
                                       std::shared_ptr<const void> keep_alive) {
  return std::shared_ptr<Buffer>(new Buffer(data, bytes, device, nullptr, std::move(keep_alive)));
}

Buffer::~Buffer() {
  if (allocator_ != nullptr) allocator_->release(data_, size_);
}

}  // namespace kuiper
