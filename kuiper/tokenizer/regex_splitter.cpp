#define PCRE2_CODE_UNIT_WIDTH 8
#include "kuiper/tokenizer/regex_splitter.h"

#include <pcre2.h>

namespace kuiper {
namespace {

// Long runs of whitespace make "\s+(?!\S)" backtrack deeply; a larger JIT stack than PCRE2's
// 32 KiB default keeps them on the fast path, and the interpreter takes over if it is not
// enough.
constexpr size_t kJitStackStart = 64 * 1024;
constexpr size_t kJitStackMax = 16 * 1024 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::unique_ptr<Compiled> compiled)
    : compiled_(std::move(compiled)) {}
RegexSplitter::~RegexSplitter() = default;

StatusOr<std::shared_ptr<const RegexSplitter>> RegexSplitter::compile(std::string_view pattern) {
  int error_code;
  PCRE2_SIZE error_offset;
  auto compiled = std::make_unique<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled->code == nullptr) {
    return invalid_format("pre-tokenizer pattern does not compile at offset " +
                          std::to_string(error_offset) + ": " + pcre2_message(error_code));
  }
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const RegexSplitter>(new RegexSplitter(std::move(compiled)));
}

StatusOr<std::vector<RegexSplitter::Match>> RegexSplitter::find_all(std::string_view text) const {
  // Per call, so that one tokenizer can be used from several threads.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(
      pcre2_match_context_create(nullptr), pcre2_match_context_free);
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> jit_stack(
      compiled_->jit ? pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr) : nullptr,
      pcre2_jit_stack_free);
  if (!match || !context) return resource_exhausted("out of memory for PCRE2 match data");
  if (jit_stack) pcre2_jit_stack_assign(context.get(), nullptr, jit_stack.get());

  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<Match> matches;
  size_t start = 0;
  // The caller has checked the UTF-8, so PCRE2 need not check it again at every match.
  const uint32_t options = PCRE2_NO_UTF_CHECK;
  while (start < text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), start, options, match.get(),
                         context.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(compiled_->code, subject, text.size(), start, options | PCRE2_NO_JIT,
                       match.get(), context.get());
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return internal_error("pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    matches.push_back({ovector[0], ovector[1]});
    start = ovector[1];
    if (ovector[1] == ovector[0]) {
      // An empty match cannot move the scan on: continue after the character there.
      ++start;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return matches;
}

StatusOr<std::vector<std::string_view>> RegexSplitter::split(std::string_view text) const {
  KUIPER_ASSIGN_OR_RETURN(const std::vector<Match> matches, find_all(text));
  std::vector<std::string_view> pieces;
  size_t start = 0;
  for (const Match& m : matches) {
    if (m.start > start) pieces.push_back(text.substr(start, m.start - start));
    size_t end = m.end;
    if (end == m.start) {
      // An empty match makes the character there a piece of its own (the built-in patterns
      // never match empty; one read from a file might).
      if (end >= text.size()) break;
      ++end;
      while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
    }
    pieces.push_back(text.substr(m.start, end - m.start));
    start = end;
  }
  if (start < text.size()) pieces.push_back(text.substr(start));
  return pieces;
}

}  // namespace kuiper
