// tiktoken's byte-level BPE: a vocabulary of byte strings that includes every single byte,
// regex pre-tokenization, and pair merging inside each piece by the rule the caller passes in.
// (HF tokenizer.json runs through hf_bpe_model, which works on the file's strings.)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/pair_merge.h"
#include "kuiper/tokenizer/regex_splitter.h"

namespace kuiper {

class ByteVocabulary {
 public:
  // Records token `id` as `bytes`; false when the id or the bytes are already taken.
  bool add(int32_t id, std::string bytes);
  // Checks that every single byte is a token (needed so that any text can be encoded).
  Status check_complete(const std::string& path) const;

  std::optional<int32_t> find(std::string_view bytes) const;
  // Empty for ids without bytes (special tokens, gaps).
  const std::string& bytes(int32_t id) const;
  int32_t byte_id(uint8_t byte) const { return byte_ids_[byte]; }
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }

 private:
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::vector<std::string> bytes_;
  std::unordered_map<std::string, int32_t, TransparentHash, std::equal_to<>> ids_;
  int32_t byte_ids_[256];
  bool byte_ids_filled_[256] = {};
};

struct ByteLevelBpe {
  const ByteVocabulary& vocabulary;
  const RegexSplitter& splitter;
  PairMergeRule merge_rule;
  // Take a piece that is itself a token as that token without merging.
  bool whole_piece_first;

  // Appends the ids of `text` (no special tokens recognised). Fails on invalid UTF-8.
  Status encode(std::string_view text, std::vector<int32_t>& out) const;
};

}  // namespace kuiper
