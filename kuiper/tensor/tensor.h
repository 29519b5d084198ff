// A typed, shaped view over a shared Buffer. Copying a Tensor copies the view, not the data;
// slices and reshapes are zero-copy. Data moves between devices only through copy_from/to.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kuiper/base/allocator.h"
#include "kuiper/base/buffer.h"
#include "kuiper/base/device.h"
#include "kuiper/base/status.h"
#include "kuiper/base/types.h"

namespace kuiper {

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contiguous tensor with fresh memory from `allocator`.
  static StatusOr<Tensor> empty(DataType dtype, Shape shape, Allocator& allocator);
  // Zero-filled host tensor; a convenience for tests and CPU code.
  static StatusOr<Tensor> zeros_cpu(DataType dtype, Shape shape);
  // Contiguous view of `buffer` starting at `byte_offset`; fails if it would run past the end.
  static StatusOr<Tensor> view(std::shared_ptr<Buffer> buffer, size_t byte_offset, DataType dtype,
                               Shape shape);

  bool is_empty() const { return buffer_ == nullptr; }
  DataType dtype() const { return dtype_; }
  DeviceType device() const { return buffer_ ? buffer_->device() : DeviceType::kCPU; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  void* raw_data() const {
    return static_cast<uint8_t*>(buffer_->data()) + byte_offset_;
  }
  template <typename T>
  T* data() const { return static_cast<T*>(raw_data()); }

  // Rows [begin, end) along the first dimension; shares memory with this tensor.
  StatusOr<Tensor> slice(int64_t begin, int64_t end) const;
  // Row `index` along the first dimension with that dimension dropped; shares memory.
  StatusOr<Tensor> select(int64_t index) const;
  // Same data, new shape with the same element count.
  StatusOr<Tensor> reshape(Shape shape) const;

  // Copies the elements of `src` (same dtype and element count, any device) into this tensor.
  Status copy_from(const Tensor& src, Stream stream = nullptr);
  // A new contiguous copy of this tensor on the allocator's device.
  StatusOr<Tensor> to(Allocator& allocator, Stream stream = nullptr) const;

  std::string describe() const;  // "fp32[4, 64] on cpu", for error messages

 private:
  Tensor(std::shared_ptr<Buffer> buffer, size_t byte_offset, DataType dtype, Shape shape);

  std::shared_ptr<Buffer> buffer_;
  size_t byte_offset_ = 0;
  DataType dtype_ = DataType::kFP32;
  Shape shape_;
  Shape strides_;  // in elements; every tensor made here is contiguous (row-major)
};

}  // namespace kuiper
