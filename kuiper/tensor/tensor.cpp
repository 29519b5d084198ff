#include "kuiper/tensor/tensor.h"

#include <cstring>
#include <sstream>

namespace kuiper {
namespace {

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Status check_shape(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("negative dimension in shape " + shape_to_string(shape));
  }
  return ok_status();
}

}  // namespace

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, size_t byte_offset, DataType dtype, Shape shape)
    : buffer_(std::move(buffer)), byte_offset_(byte_offset), dtype_(dtype),
      shape_(std::move(shape)), strides_(contiguous_strides(shape_)) {}

StatusOr<Tensor> Tensor::empty(DataType dtype, Shape shape, Allocator& allocator) {
  KUIPER_RETURN_IF_ERROR(check_shape(shape));
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  // A zero-element tensor still gets a buffer so that it is distinguishable from "no tensor".
  KUIPER_ASSIGN_OR_RETURN(auto buffer, Buffer::allocate(bytes == 0 ? 1 : bytes, allocator));
  return Tensor(std::move(buffer), 0, dtype, std::move(shape));
}

StatusOr<Tensor> Tensor::zeros_cpu(DataType dtype, Shape shape) {
  KUIPER_ASSIGN_OR_RETURN(Tensor t, empty(dtype, std::move(shape), cpu_allocator()));
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

StatusOr<Tensor> Tensor::view(std::shared_ptr<Buffer> buffer, size_t byte_offset, DataType dtype,
                              Shape shape) {
  KUIPER_RETURN_IF_ERROR(check_shape(shape));
  if (buffer == nullptr) return invalid_argument("tensor view of a null buffer");
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (byte_offset > buffer->size() || bytes > buffer->size() - byte_offset) {
    return out_of_range("view of " + std::to_string(bytes) + " bytes at offset " +
                        std::to_string(byte_offset) + " runs past a buffer of " +
                        std::to_string(buffer->size()) + " bytes");
  }
  return Tensor(std::move(buffer), byte_offset, dtype, std::move(shape));
}

StatusOr<Tensor> Tensor::slice(int64_t begin, int64_t end) const {
  if (ndim() == 0) return invalid_argument("cannot slice a scalar tensor");
  if (begin < 0 || end < begin || end > shape_[0]) {
    return out_of_range("slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") of " + describe());
  }
  Shape shape = shape_;
  shape[0] = end - begin;
  const size_t offset = byte_offset_ + static_cast<size_t>(begin * strides_[0]) * dtype_size(dtype_);
  return Tensor(buffer_, offset, dtype_, std::move(shape));
}

StatusOr<Tensor> Tensor::select(int64_t index) const {
  KUIPER_ASSIGN_OR_RETURN(Tensor row, slice(index, index + 1));
  row.shape_.erase(row.shape_.begin());
  row.strides_.erase(row.strides_.begin());
  return row;
}

StatusOr<Tensor> Tensor::reshape(Shape shape) const {
  KUIPER_RETURN_IF_ERROR(check_shape(shape));
  if (shape_numel(shape) != numel()) {
    return invalid_argument("cannot reshape " + describe() + " to " + shape_to_string(shape));
  }
  return Tensor(buffer_, byte_offset_, dtype_, std::move(shape));
}

Status Tensor::copy_from(const Tensor& src, Stream stream) {
  if (is_empty() || src.is_empty()) return invalid_argument("copy with an empty tensor");
  if (src.dtype_ != dtype_ || src.numel() != numel()) {
    return invalid_argument("cannot copy " + src.describe() + " into " + describe());
  }
  return copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes(), stream);
}

StatusOr<Tensor> Tensor::to(Allocator& allocator, Stream stream) const {
  KUIPER_ASSIGN_OR_RETURN(Tensor out, empty(dtype_, shape_, allocator));
  KUIPER_RETURN_IF_ERROR(out.copy_from(*this, stream));
  return out;
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_to_string(shape_) + " on " +
         std::string(device_name(device()));
}

}  // namespace kuiper
