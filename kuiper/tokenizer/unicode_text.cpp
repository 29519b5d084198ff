#include "kuiper/tokenizer/unicode_text.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>


namespace kuiper::unicode {
namespace {

StatusOr<std::u16string> to_utf16(std::string_view text) {
  UErrorCode error = U_ZERO_ERROR;
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, text.data(), static_cast<int32_t>(text.size()), &error);
  if (error != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(error)) {
    return invalid_argument(std::string("text is not valid UTF-8 (ICU: ") + u_errorName(error) + ")");
  }
  std::u16string wide(length, u'\0');
  error = U_ZERO_ERROR;
  u_strFromUTF8(wide.data(), length, nullptr, text.data(), static_cast<int32_t>(text.size()), &error);
  if (U_FAILURE(error)) return internal_error(std::string("ICU u_strFromUTF8: ") + u_errorName(error));
  return wide;
}

StatusOr<std::string> to_utf8(const std::u16string& wide) {
  UErrorCode error = U_ZERO_ERROR;
  int32_t length = 0;
  u_strToUTF8(nullptr, 0, &length, wide.data(), static_cast<int32_t>(wide.size()), &error);
  if (error != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(error)) {
    return internal_error(std::string("ICU u_strToUTF8: ") + u_errorName(error));
  }
  std::string text(length, '\0');
  error = U_ZERO_ERROR;
  u_strToUTF8(text.data(), length, nullptr, wide.data(), static_cast<int32_t>(wide.size()), &error);
  if (U_FAILURE(error)) return internal_error(std::string("ICU u_strToUTF8: ") + u_errorName(error));
  return text;
}

const UNormalizer2* normalizer_for(NormalForm form, UErrorCode* error) {
  switch (form) {
    case NormalForm::kNfc: return unorm2_getNFCInstance(error);
    case NormalForm::kNfd: return unorm2_getNFDInstance(error);
    case NormalForm::kNfkc: return unorm2_getNFKCInstance(error);
    case NormalForm::kNfkd: return unorm2_getNFKDInstance(error);
  }
  return nullptr;
}

}  // namespace

StatusOr<std::string> normalize(std::string_view text, NormalForm form) {
  if (text.empty()) return std::string();
  UErrorCode error = U_ZERO_ERROR;
  const UNormalizer2* normalizer = normalizer_for(form, &error);
  if (U_FAILURE(error)) return internal_error(std::string("ICU normalizer: ") + u_errorName(error));
  KUIPER_ASSIGN_OR_RETURN(const std::u16string wide, to_utf16(text));
  std::u16string out(wide.size() * 3 + 16, u'\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    error = U_ZERO_ERROR;
    const int32_t length = unorm2_normalize(normalizer, wide.data(), static_cast<int32_t>(wide.size()),
                                            out.data(), static_cast<int32_t>(out.size()), &error);
    if (error == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(length, u'\0');
      continue;
    }
    if (U_FAILURE(error)) return internal_error(std::string("ICU unorm2_normalize: ") + u_errorName(error));
    out.resize(length);
    return to_utf8(out);
  }
  return internal_error("ICU unorm2_normalize: output size changed between calls");
}

StatusOr<std::string> lowercase(std::string_view text) {
  KUIPER_ASSIGN_OR_RETURN(const std::u16string wide, to_utf16(text));
  std::u16string out;
  UChar lowered[16];
  for (size_t i = 0; i < wide.size();) {
    const size_t length = U16_IS_LEAD(wide[i]) && i + 1 < wide.size() && U16_IS_TRAIL(wide[i + 1]) ? 2 : 1;
    UErrorCode error = U_ZERO_ERROR;
    const int32_t n = u_strToLower(lowered, 16, wide.data() + i, static_cast<int32_t>(length), "", &error);
    if (U_FAILURE(error)) return internal_error(std::string("ICU u_strToLower: ") + u_errorName(error));
    out.append(lowered, n);
    i += length;
  }
  return to_utf8(out);
}

CodePoint code_point_at(std::string_view text, size_t offset) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  int32_t i = static_cast<int32_t>(offset);
  UChar32 c;
  U8_NEXT(bytes, i, static_cast<int32_t>(text.size()), c);
  return {static_cast<char32_t>(c < 0 ? 0xFFFD : c), static_cast<size_t>(i) - offset};
}

CodePoint code_point_before(std::string_view text, size_t end) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  int32_t i = static_cast<int32_t>(end);
  UChar32 c;
  U8_PREV(bytes, 0, i, c);
  return {static_cast<char32_t>(c < 0 ? 0xFFFD : c), end - static_cast<size_t>(i)};
}

bool is_white_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

size_t white_space_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    const CodePoint c = code_point_before(text, end);
    if (!is_white_space(c.value)) break;
    end -= c.length;
  }
  return end;
}

size_t white_space_run_end(std::string_view text, size_t start) {
  while (start < text.size()) {
    const CodePoint c = code_point_at(text, start);
    if (!is_white_space(c.value)) break;
    start += c.length;
  }
  return start;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, start)) {
    out.append(text.substr(start, at - start));
    out.append(to);
    start = at + from.size();
  }
  out.append(text.substr(start));
  return out;
}

bool is_word_char(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) return true;
  const int8_t type = u_charType(cp);
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK ||
         type == U_DECIMAL_DIGIT_NUMBER || type == U_CONNECTOR_PUNCTUATION;
}

}  // namespace kuiper::unicode
