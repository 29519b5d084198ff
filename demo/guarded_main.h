// The backstop every program's main() goes through: an exception that escapes the program's
// body (the library returns Status, but the standard library and third-party code it calls can
// still throw) becomes one error line and exit code 1 instead of std::terminate and exit 134.
#pragma once

#include <cstdio>
#include <exception>

namespace kuiper::cli {

template <typename Body>
int guarded_main(const char* program, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: unexpected exception\n", program);
  }
  return 1;
}

}  // namespace kuiper::cli
