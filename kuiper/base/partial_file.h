// A file written under a temporary name ("<path>.partial", the convention of every kuiper
// writer) and renamed to its final name only once complete, so that a failed or interrupted
// write never leaves a truncated file that looks valid.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "kuiper/base/status.h"

namespace kuiper {

class PartialFile {
 public:
  static std::string partial_path(const std::string& path) { return path + ".partial"; }

  static StatusOr<std::unique_ptr<PartialFile>> create(const std::string& path);
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  // Removes the partial file unless commit() succeeded.
  ~PartialFile();

  Status write(const void* data, size_t bytes);
  // Flushes, closes and renames the partial file to the final path.
  Status commit();

 private:
  PartialFile(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
  bool committed_ = false;
};

}  // namespace kuiper
