#include "kuiper/tokenizer/hf_pre_tokenizer.h"

#include <cctype>

#include "kuiper/tokenizer/byte_level_alphabet.h"
#include "kuiper/tokenizer/unicode_text.h"

namespace kuiper::hf {
namespace {

// A regex that matches `literal` exactly: ASCII punctuation escaped, everything else as is.
std::string escape_regex(const std::string& literal) {
  std::string out;
  for (const char c : literal) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) out += '\\';
    out += c;
  }
  return out;
}

StatusOr<PreTokenizer::Behavior> parse_behavior(const std::string& name, const std::string& where) {
  using B = PreTokenizer::Behavior;
  if (name == "Removed") return B::kRemoved;
  if (name == "Isolated") return B::kIsolated;
  if (name == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (name == "MergedWithNext") return B::kMergedWithNext;
  if (name == "Contiguous") return B::kContiguous;
  return invalid_format(where + ": unknown split behavior \"" + name + "\"");
}

struct Span {
  size_t start, end;
  bool is_match;
};

// The stretches of `text` between and at the matches, in order, covering all of it.
std::vector<Span> cover(const std::vector<RegexSplitter::Match>& matches, size_t length, bool invert) {
  std::vector<Span> spans;
  size_t previous = 0;
  for (const RegexSplitter::Match& m : matches) {
    if (previous != m.start) spans.push_back({previous, m.start, invert});
    spans.push_back({m.start, m.end, !invert});
    previous = m.end;
  }
  if (previous != length) spans.push_back({previous, length, invert});
  return spans;
}

// Where the pieces go, as tokenizers' NormalizedString::split defines each behavior.
std::vector<std::pair<size_t, size_t>> apply_behavior(const std::vector<Span>& spans,
                                                      PreTokenizer::Behavior behavior) {
  using B = PreTokenizer::Behavior;
  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case B::kIsolated:
      for (const Span& s : spans) out.emplace_back(s.start, s.end);
      break;
    case B::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.emplace_back(s.start, s.end);
      }
      break;
    case B::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case B::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case B::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

Status split_pieces(std::vector<Piece>& pieces, const RegexSplitter& regex, PreTokenizer::Behavior behavior,
                    bool invert) {
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    KUIPER_ASSIGN_OR_RETURN(const auto matches, regex.find_all(piece.text));
    for (const auto& [start, end] : apply_behavior(cover(matches, piece.text.size(), invert), behavior)) {
      if (end > start) out.push_back({piece.text.substr(start, end - start), piece.at_text_start && start == 0});
    }
  }
  pieces = std::move(out);
  return ok_status();
}

}  // namespace

StatusOr<PreTokenizer> PreTokenizer::parse(const json& node, const std::string& path) {
  PreTokenizer pre;
  KUIPER_ASSIGN_OR_RETURN(const std::vector<json> steps, component_steps(node, "pretokenizers", path + ": pre-tokenizer"));
  for (const json& step : steps) KUIPER_RETURN_IF_ERROR(pre.add(step, path));
  return pre;
}

Status PreTokenizer::add(const json& node, const std::string& path) {
  const std::string type = type_of(node);
  const std::string where = path + ": pre-tokenizer " + type;
  Step step{};
  if (type == "Split") {
    step.kind = Kind::kSplit;
    const json pattern = node.value("pattern", json());
    KUIPER_ASSIGN_OR_RETURN(const std::string literal, string_field(pattern, "String", where));
    KUIPER_ASSIGN_OR_RETURN(std::string regex, string_field(pattern, "Regex", where));
    if (regex.empty()) regex = escape_regex(literal);
    if (regex.empty()) return invalid_format(where + " has no (non-empty) String or Regex pattern");
    KUIPER_ASSIGN_OR_RETURN(step.regex, compile_regex(regex, where));
    KUIPER_ASSIGN_OR_RETURN(const std::string behavior, string_field(node, "behavior", where));
    KUIPER_ASSIGN_OR_RETURN(step.behavior, parse_behavior(behavior, where));
    KUIPER_ASSIGN_OR_RETURN(step.invert, bool_field(node, "invert", where, false));
  } else if (type == "Digits") {
    step.kind = Kind::kSplit;
    KUIPER_ASSIGN_OR_RETURN(const bool individual, bool_field(node, "individual_digits", where, false));
    // char::is_numeric is the N categories; grouped digits are one Contiguous run.
    KUIPER_ASSIGN_OR_RETURN(step.regex, RegexSplitter::compile(individual ? R"(\p{N})" : R"(\p{N}+)"));
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    KUIPER_ASSIGN_OR_RETURN(step.add_prefix_space, bool_field(node, "add_prefix_space", where, true));
    KUIPER_ASSIGN_OR_RETURN(const bool use_regex, bool_field(node, "use_regex", where, true));
    if (use_regex) {
      KUIPER_ASSIGN_OR_RETURN(step.regex, RegexSplitter::compile(kGpt2SplitPattern));
    }
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    KUIPER_ASSIGN_OR_RETURN(step.replacement, char_field(node, "replacement", where, ""));
    KUIPER_ASSIGN_OR_RETURN(const std::string scheme, string_field(node, "prepend_scheme", where, "always"));
    if (scheme == "always") {
      step.prepend = Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend = Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend = Prepend::kNever;
    } else {
      return invalid_format(where + ": unknown prepend_scheme \"" + scheme + "\"");
    }
    KUIPER_ASSIGN_OR_RETURN(const bool add_prefix_space, bool_field(node, "add_prefix_space", where, true));
    if (!add_prefix_space) {
      if (step.prepend != Prepend::kNever && node.contains("prepend_scheme")) {
        return invalid_format(where + ": add_prefix_space does not match prepend_scheme");
      }
      step.prepend = Prepend::kNever;
    }
    KUIPER_ASSIGN_OR_RETURN(step.split, bool_field(node, "split", where, true));
    if (step.split) {
      KUIPER_ASSIGN_OR_RETURN(step.regex, RegexSplitter::compile(escape_regex(step.replacement)));
    }
  } else {
    return unsupported(path + ": pre-tokenizer \"" + type +
                       "\" is not supported (supported: Sequence, Split, ByteLevel, Digits, Metaspace)");
  }
  steps_.push_back(std::move(step));
  return ok_status();
}

StatusOr<std::vector<Piece>> PreTokenizer::apply(std::vector<Piece> pieces) const {
  std::erase_if(pieces, [](const Piece& p) { return p.text.empty(); });
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kSplit:
        KUIPER_RETURN_IF_ERROR(split_pieces(pieces, *step.regex, step.behavior, step.invert));
        break;
      case Kind::kByteLevel:
        for (Piece& piece : pieces) {
          if (step.add_prefix_space && !piece.text.starts_with(' ')) piece.text.insert(piece.text.begin(), ' ');
        }
        if (step.regex) KUIPER_RETURN_IF_ERROR(split_pieces(pieces, *step.regex, Behavior::kIsolated, false));
        for (Piece& piece : pieces) piece.text = bytes_to_byte_level(piece.text);
        break;
      case Kind::kMetaspace:
        for (Piece& piece : pieces) {
          piece.text = unicode::replace_all(piece.text, " ", step.replacement);
          const bool prepend = step.prepend == Prepend::kAlways ||
                               (step.prepend == Prepend::kFirst && piece.at_text_start);
          if (prepend && !piece.text.starts_with(step.replacement)) piece.text.insert(0, step.replacement);
        }
        if (step.regex) KUIPER_RETURN_IF_ERROR(split_pieces(pieces, *step.regex, Behavior::kMergedWithNext, false));
        break;
    }
  }
  return pieces;
}

}  // namespace kuiper::hf
