// The "pre_tokenizer" of an HF tokenizer.json: cuts normalized text into the pieces the BPE
// model encodes one by one. Sequence, Split (string or regex pattern read from the file, every
// behavior, invert), ByteLevel (add_prefix_space, use_regex; pieces come out spelled in GPT-2's
// byte alphabet), Digits (individual_digits) and Metaspace (replacement, prepend_scheme,
// split). Any other pre-tokenizer is refused by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/hf_json_fields.h"
#include "kuiper/tokenizer/regex_splitter.h"

namespace kuiper::hf {

struct Piece {
  std::string text;
  // Whether the piece begins where the whole input text begins (Metaspace's "first" scheme
  // prepends only there).
  bool at_text_start = false;
};

class PreTokenizer {
 public:
  static StatusOr<PreTokenizer> parse(const json& node, const std::string& path);
  // Splits and rewrites `pieces` (valid UTF-8); empty pieces are dropped.
  StatusOr<std::vector<Piece>> apply(std::vector<Piece> pieces) const;

  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    std::shared_ptr<const RegexSplitter> regex;  // Split, Digits, ByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;
  };
  Status add(const json& node, const std::string& path);
  std::vector<Step> steps_;
};

}  // namespace kuiper::hf
