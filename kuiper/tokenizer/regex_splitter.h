// Pre-tokenization: cuts text into the pieces BPE works on, with a PCRE2 pattern in UTF mode
// where \p{L}, \s etc. follow Unicode (PCRE2_UCP), JIT-compiled when the library supports it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

// The LLaMA 3 pattern (also GPT-4's cl100k_base).
inline constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's pattern, used by HF byte-level pre-tokenizers that do their own splitting.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class RegexSplitter {
 public:
  static StatusOr<std::shared_ptr<const RegexSplitter>> compile(std::string_view pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // The matches in order, and the stretches between them as pieces of their own (HF's
  // "Isolated" behaviour; the patterns above match every character, so there are none).
  // `text` must be valid UTF-8.
  StatusOr<std::vector<std::string_view>> split(std::string_view text) const;

  // Byte offsets [start, end) of every match, leftmost first, each search starting where the
  // previous match ended (one character further after an empty match, which is reported with
  // start == end). `text` must be valid UTF-8.
  struct Match {
    size_t start;
    size_t end;
  };
  StatusOr<std::vector<Match>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  explicit RegexSplitter(std::unique_ptr<Compiled> compiled);
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace kuiper
