#include "kuiper/tokenizer/hf_normalizer.h"

namespace kuiper::hf {
namespace {

StatusOr<std::string> replace_regex(const std::string& text, const RegexSplitter& regex, const std::string& with) {
  KUIPER_ASSIGN_OR_RETURN(const auto matches, regex.find_all(text));
  std::string out;
  size_t start = 0;
  for (const RegexSplitter::Match& m : matches) {
    out.append(text, start, m.start - start);
    out += with;
    start = m.end;
  }
  out.append(text, start, std::string::npos);
  return out;
}

std::string strip_white_space(const std::string& text, bool left, bool right) {
  const size_t begin = left ? unicode::white_space_run_end(text, 0) : 0;
  const size_t end = right ? std::max(begin, unicode::white_space_run_start(text, text.size())) : text.size();
  return text.substr(begin, end - begin);
}

}  // namespace

StatusOr<Normalizer> Normalizer::parse(const json& node, const std::string& path) {
  Normalizer normalizer;
  KUIPER_ASSIGN_OR_RETURN(const std::vector<json> steps, component_steps(node, "normalizers", path + ": normalizer"));
  for (const json& step : steps) KUIPER_RETURN_IF_ERROR(normalizer.add(step, path));
  return normalizer;
}

Status Normalizer::add(const json& node, const std::string& path) {
  const std::string type = type_of(node);
  const std::string where = path + ": normalizer " + type;
  Step step{};
  if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    KUIPER_ASSIGN_OR_RETURN(step.text, string_field(node, "prepend", where));
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    KUIPER_ASSIGN_OR_RETURN(step.text, string_field(node, "content", where));
    const json pattern = node.value("pattern", json());
    KUIPER_ASSIGN_OR_RETURN(step.literal, string_field(pattern, "String", where));
    KUIPER_ASSIGN_OR_RETURN(const std::string regex, string_field(pattern, "Regex", where));
    if (!regex.empty()) {
      KUIPER_ASSIGN_OR_RETURN(step.regex, compile_regex(regex, where));
    } else if (step.literal.empty()) {
      return invalid_format(where + " has no (non-empty) String or Regex pattern");
    }
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = Kind::kUnicodeForm;
    step.form = type == "NFC"   ? unicode::NormalForm::kNfc
                : type == "NFD" ? unicode::NormalForm::kNfd
                : type == "NFKC" ? unicode::NormalForm::kNfkc
                                 : unicode::NormalForm::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    KUIPER_ASSIGN_OR_RETURN(step.strip_left, bool_field(node, "strip_left", where, false));
    KUIPER_ASSIGN_OR_RETURN(step.strip_right, bool_field(node, "strip_right", where, false));
  } else {
    return unsupported(path + ": normalizer \"" + type +
                       "\" is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, "
                       "NFKD, Lowercase, Strip)");
  }
  steps_.push_back(std::move(step));
  return ok_status();
}

StatusOr<std::string> Normalizer::apply(std::string text) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        // Only non-empty text gets the prefix.
        if (!text.empty()) text = step.text + text;
        break;
      case Kind::kReplace: {
        if (step.regex) {
          KUIPER_ASSIGN_OR_RETURN(text, replace_regex(text, *step.regex, step.text));
        } else {
          text = unicode::replace_all(text, step.literal, step.text);
        }
        break;
      }
      case Kind::kUnicodeForm: {
        KUIPER_ASSIGN_OR_RETURN(text, unicode::normalize(text, step.form));
        break;
      }
      case Kind::kLowercase: {
        KUIPER_ASSIGN_OR_RETURN(text, unicode::lowercase(text));
        break;
      }
      case Kind::kStrip:
        text = strip_white_space(text, step.strip_left, step.strip_right);
        break;
    }
  }
  return text;
}

}  // namespace kuiper::hf
