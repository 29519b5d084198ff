// A read-only memory map of a whole file: checkpoints are used in place, without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kuiper/base/status.h"

namespace kuiper {

class MappedFile {
 public:
  // Fails with a message naming the file when it is missing, unreadable, empty or not a regular
  // file (a FIFO would block the reader forever).
  static StatusOr<std::shared_ptr<MappedFile>> open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace kuiper
