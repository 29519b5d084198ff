// Error values that travel through the library. The library never exits or throws on bad
// input: it returns a Status (or a StatusOr<T>), and only programs decide what to do with it.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include <glog/logging.h>

namespace kuiper {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // a caller passed something malformed (bad flag value, bad shape)
  kNotFound,          // a file or tensor that should exist does not
  kIoError,           // the OS refused a read, write or map
  kInvalidFormat,     // a file exists but is not what it claims to be (truncated, bad magic)
  kOutOfRange,        // an index or length beyond what is allowed (prompt longer than context)
  kUnsupported,       // valid request this build or device cannot serve (no CUDA, unknown dtype)
  kResourceExhausted, // not enough memory
  kInternal,          // a bug or a failing driver call
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid format: model.bin: file is 12 bytes, header needs 28"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status invalid_format(std::string m) { return {StatusCode::kInvalidFormat, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    CHECK(!std::get<Status>(state_).ok()) << "StatusOr built from an OK status carries no value";
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace kuiper

#define KUIPER_CONCAT_INNER(a, b) a##b
#define KUIPER_CONCAT(a, b) KUIPER_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define KUIPER_RETURN_IF_ERROR(expr)               \
  do {                                             \
    ::kuiper::Status kuiper_status_ = (expr);      \
    if (!kuiper_status_.ok()) return kuiper_status_; \
  } while (0)

// `KUIPER_ASSIGN_OR_RETURN(auto x, make_x());` — binds the value or returns the error.
#define KUIPER_ASSIGN_OR_RETURN(lhs, expr) \
  KUIPER_ASSIGN_OR_RETURN_IMPL(KUIPER_CONCAT(kuiper_statusor_, __COUNTER__), lhs, expr)
#define KUIPER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
