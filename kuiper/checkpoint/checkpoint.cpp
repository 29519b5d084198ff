#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

FileCursor::FileCursor(std::shared_ptr<MappedFile> file)
    : file_(std::move(file)),
      buffer_(Buffer::borrow(const_cast<uint8_t*>(file_->data()), file_->size(), DeviceType::kCPU,
                             file_)) {}

Status FileCursor::seek(size_t offset) {
  if (offset > file_->size()) {
    return invalid_format(file_->path() + ": offset " + std::to_string(offset) +
                          " is past the end of the file (" + std::to_string(file_->size()) + " bytes)");
  }
  offset_ = offset;
  return ok_status();
}

Status FileCursor::skip(size_t bytes, const char* what) {
  if (bytes > remaining()) {
    return invalid_format(file_->path() + ": truncated: " + what + " needs " + std::to_string(bytes) +
                          " bytes, " + std::to_string(remaining()) + " left");
  }
  offset_ += bytes;
  return ok_status();
}

StatusOr<Tensor> FileCursor::take(DataType dtype, const Shape& shape, const std::string& what) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (bytes > remaining()) {
    return invalid_format(file_->path() + ": truncated: " + what + " needs " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(offset_) + ", " +
                          std::to_string(remaining()) + " left");
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor t, Tensor::view(buffer_, offset_, dtype, shape));
  offset_ += bytes;
  return t;
}

}  // namespace kuiper
