// What reading a model file gives: a config plus host tensors (usually zero-copy views into the
// memory-mapped file), whatever the format; and what each format provides to the registry
// (load_checkpoint.h). A file that fails its format's checks is refused with one line naming
// the file and problem.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kuiper/base/buffer.h"
#include "kuiper/base/mapped_file.h"
#include "kuiper/base/status.h"
#include "kuiper/model/llama_config.h"
#include "kuiper/model/llama_weights.h"

namespace kuiper {

struct Checkpoint {
  LlamaConfig config;
  LlamaWeights weights;  // host tensors
  std::string format;    // human-readable, e.g. "llama2.c v1 (fp32)"
  std::string path;
  // Tensors the file holds that the model does not use (a loader warns about each): a part of
  // the network kuiper does not run would otherwise be dropped silently.
  std::vector<std::string> ignored_tensors;
};

// A file format kuiper reads. `detect` looks only at the bytes (cheap, no side effects).
struct CheckpointFormat {
  const char* name;
  bool (*detect)(const std::shared_ptr<MappedFile>& file);
  StatusOr<Checkpoint> (*load)(std::shared_ptr<MappedFile> file);
};

// Walks a mapped file, handing out bounds-checked tensor views in file order.
class FileCursor {
 public:
  explicit FileCursor(std::shared_ptr<MappedFile> file);

  size_t offset() const { return offset_; }
  size_t remaining() const { return file_->size() - offset_; }
  Status seek(size_t offset);
  Status skip(size_t bytes, const char* what);
  // A view of the next numel(shape) elements; the error names `what` and the shortfall.
  StatusOr<Tensor> take(DataType dtype, const Shape& shape, const std::string& what);
  // Reads a little-endian scalar (headers).
  template <typename T>
  StatusOr<T> read(const char* what);

  const std::shared_ptr<MappedFile>& file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::shared_ptr<Buffer> buffer_;  // borrows the mapping, keeps the file alive
  size_t offset_ = 0;
};

template <typename T>
StatusOr<T> FileCursor::read(const char* what) {
  if (remaining() < sizeof(T)) {
    return invalid_format(file_->path() + ": truncated while reading " + what);
  }
  T value;
  std::memcpy(&value, file_->data() + offset_, sizeof(T));
  offset_ += sizeof(T);
  return value;
}

}  // namespace kuiper
