// The real tokenizer a text harness runs on: KUIPER_FUZZ_TOKENIZER, a path CMake sets per
// harness, loaded once per process.
#pragma once

#include <cstdlib>
#include <memory>

#include "kuiper/tokenizer/tokenizer.h"

#ifndef KUIPER_FUZZ_TOKENIZER
#error "a harness including fuzz_tokenizer.h needs KUIPER_FUZZ_TOKENIZER (test/fuzz/CMakeLists.txt)"
#endif

namespace kuiper::fuzz {

inline const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> loaded = [] {
    auto t = load_tokenizer(KUIPER_FUZZ_TOKENIZER);
    if (!t.ok()) std::abort();  // the harness is misconfigured, not the input bad
    return std::move(t).value();
  }();
  return *loaded;
}

}  // namespace kuiper::fuzz
