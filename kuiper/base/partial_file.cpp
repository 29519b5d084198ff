#include "kuiper/base/partial_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kuiper {

StatusOr<std::unique_ptr<PartialFile>> PartialFile::create(const std::string& path) {
  const std::string temp = partial_path(path);
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return io_error(temp + ": cannot create: " + std::strerror(errno));
  return std::unique_ptr<PartialFile>(new PartialFile(path, file));
}

PartialFile::~PartialFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove(partial_path(path_), ignored);
  }
}

Status PartialFile::write(const void* data, size_t bytes) {
  if (file_ == nullptr) return internal_error(path_ + ": write after close");
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    return io_error(partial_path(path_) + ": write failed: " + std::strerror(errno));
  }
  return ok_status();
}

Status PartialFile::commit() {
  if (file_ == nullptr) return internal_error(path_ + ": committed twice");
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return io_error(partial_path(path_) + ": close failed: " + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(partial_path(path_), path_, ec);
  if (ec) return io_error(path_ + ": cannot rename from " + partial_path(path_) + ": " + ec.message());
  committed_ = true;
  return ok_status();
}

}  // namespace kuiper
