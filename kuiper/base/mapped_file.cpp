#include "kuiper/base/mapped_file.h"

#include "kuiper/base/regular_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kuiper {

StatusOr<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer before fstat could refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return file_error(path, errno);
  struct stat st {};
  Status kind = ::fstat(fd, &st) == 0 ? regular_file_status(path, st) : file_error(path, errno);
  if (!kind.ok()) {
    ::close(fd);
    return kind;
  }
  if (st.st_size == 0) {
    ::close(fd);
    return invalid_format(path + ": file is empty");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (data == MAP_FAILED) return io_error(path + ": cannot map: " + std::strerror(err));
  return std::shared_ptr<MappedFile>(
      new MappedFile(path, static_cast<const uint8_t*>(data), size));
}

MappedFile::~MappedFile() { ::munmap(const_cast<uint8_t*>(data_), size_); }

}  // namespace kuiper
