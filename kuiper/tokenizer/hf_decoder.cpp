#include "kuiper/tokenizer/hf_decoder.h"

#include "kuiper/tokenizer/byte_level_alphabet.h"
#include "kuiper/tokenizer/byte_piece.h"
#include "kuiper/tokenizer/unicode_text.h"

namespace kuiper::hf {
StatusOr<Decoder> Decoder::parse(const json& node, const std::string& path) {
  Decoder decoder;
  KUIPER_ASSIGN_OR_RETURN(const std::vector<json> steps, component_steps(node, "decoders", path + ": decoder"));
  decoder.has_decoder_ = !node.is_null();
  for (const json& step : steps) KUIPER_RETURN_IF_ERROR(decoder.add(step, path));
  return decoder;
}

Status Decoder::add(const json& node, const std::string& path) {
  const std::string type = type_of(node);
  const std::string where = path + ": decoder " + type;
  // After ByteLevel the text is one fused string of bytes; the files in scope end there.
  if (!steps_.empty() && steps_.back().kind == Kind::kByteLevel) {
    return unsupported(where + " after a ByteLevel decoder is not supported");
  }
  Step step{};
  if (type == "Fuse") {
    fused_ = true;
    return ok_status();
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    const json pattern = node.value("pattern", json());
    KUIPER_ASSIGN_OR_RETURN(step.from, string_field(pattern, "String", where));
    KUIPER_ASSIGN_OR_RETURN(step.to, string_field(node, "content", where));
    if (step.from.empty()) return unsupported(where + ": only a non-empty String pattern is supported");
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    KUIPER_ASSIGN_OR_RETURN(step.content, char_field(node, "content", where, ""));
    KUIPER_ASSIGN_OR_RETURN(const int64_t start, count_field(node, "start", where, 0));
    KUIPER_ASSIGN_OR_RETURN(const int64_t stop, count_field(node, "stop", where, 0));
    // The end of a streamed sequence is not known while streaming.
    if (stop != 0) return unsupported(where + ": stripping the end (stop > 0) is not supported");
    step.start = static_cast<size_t>(start);
    step.only_first = fused_;
  } else if (type == "Metaspace") {
    if (fused_) return unsupported(where + " after Fuse is not supported");
    step.kind = Kind::kMetaspace;
    KUIPER_ASSIGN_OR_RETURN(step.from, char_field(node, "replacement", where, "\xE2\x96\x81"));
    KUIPER_ASSIGN_OR_RETURN(const std::string scheme, string_field(node, "prepend_scheme", where, "always"));
    KUIPER_ASSIGN_OR_RETURN(const bool add_prefix_space, bool_field(node, "add_prefix_space", where, true));
    step.prepends = scheme != "never" && add_prefix_space;
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    fused_ = true;
  } else {
    return unsupported(path + ": decoder \"" + type +
                       "\" is not supported (supported: Sequence, Replace, ByteFallback, Fuse, Strip, "
                       "Metaspace, ByteLevel)");
  }
  steps_.push_back(std::move(step));
  return ok_status();
}

std::string Decoder::decode(std::string token, bool first) const {
  if (!has_decoder_) return first ? token : " " + token;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kReplace:
        token = unicode::replace_all(token, step.from, step.to);
        break;
      case Kind::kByteFallback:
        if (const auto byte = parse_byte_piece(token)) token = std::string(1, static_cast<char>(*byte));
        break;
      case Kind::kStrip:
        if (!step.only_first || first) {
          for (size_t n = 0; n < step.start && !step.content.empty() && token.starts_with(step.content); ++n) {
            token.erase(0, step.content.size());
          }
        }
        break;
      case Kind::kMetaspace:
        // The first token loses every replacement character; elsewhere each becomes a space.
        token = unicode::replace_all(token, step.from, first && step.prepends ? "" : " ");
        break;
      case Kind::kByteLevel:
        // A token with a character outside the alphabet (an added token) stays as written.
        if (auto bytes = byte_level_to_bytes(token)) token = std::move(*bytes);
        break;
    }
  }
  return token;
}

}  // namespace kuiper::hf
