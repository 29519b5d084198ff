#include "kuiper/base/status.h"

namespace kuiper {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kInvalidFormat: return "invalid format";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kResourceExhausted: return "out of memory";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace kuiper
