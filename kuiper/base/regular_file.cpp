#include "kuiper/base/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kuiper {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

Status file_error(const std::string& path, int error) {
  if (error == ENOENT) return not_found(path + ": no such file or directory");
  return io_error(path + ": " + std::strerror(error));
}

Status regular_file_status(const std::string& path, const struct stat& info) {
  if (S_ISREG(info.st_mode)) return ok_status();
  return invalid_argument(path + ": is " + kind_of(info.st_mode) + ", expected a regular file");
}

Status check_regular_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return file_error(path, errno);
  return regular_file_status(path, info);
}

Status check_directory(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return file_error(path, errno);
  if (S_ISDIR(info.st_mode)) return ok_status();
  return invalid_argument(path + ": is not a directory");
}

StatusOr<std::string> read_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before the check
  // below could refuse it. Reads of a regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return file_error(path, errno);
  struct stat info {};
  Status status = ::fstat(fd, &info) == 0 ? regular_file_status(path, info) : file_error(path, errno);
  std::string content;
  if (status.ok()) content.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (status.ok() && done < content.size()) {
    const ssize_t n = ::read(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = io_error(path + ": read failed: " + std::strerror(errno));
    if (n == 0) content.resize(done);  // the file shrank while being read
    done += n > 0 ? static_cast<size_t>(n) : 0;
  }
  ::close(fd);
  if (!status.ok()) return status;
  return content;
}

}  // namespace kuiper
