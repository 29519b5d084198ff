// Every file kuiper reads is first checked to be a regular file (or a directory where one is
// expected): a FIFO, socket or device given as a model, tokenizer, shard or input text would
// otherwise block forever in open() or read() instead of failing with one line.
#pragma once

#include <string>

#include <sys/stat.h>

#include "kuiper/base/status.h"

namespace kuiper {

// OK when `path` (symlinks followed) is a regular file; otherwise an error naming the path and
// what it is instead (missing, a directory, a FIFO, a device, a symlink loop, unreadable).
Status check_regular_file(const std::string& path);

// OK when `path` is a directory; the same kind of error otherwise.
Status check_directory(const std::string& path);

// The error for a file whose stat() gave `info` when a regular file was expected, or OK.
Status regular_file_status(const std::string& path, const struct stat& info);

// The error for a failed stat() or open() of `path` with errno `error`.
Status file_error(const std::string& path, int error);

// The whole content of the regular file at `path`.
StatusOr<std::string> read_regular_file(const std::string& path);

}  // namespace kuiper
