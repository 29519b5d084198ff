// The "model" of an HF tokenizer.json when it is BPE: vocab (string -> id), merges (by rank),
// and the options LLaMA-family files use: byte_fallback ("<0xNN>" tokens for characters the
// vocab lacks), unk_token with fuse_unk, ignore_merges, continuing_subword_prefix,
// end_of_word_suffix. A character with no token, no byte fallback and no unk_token is dropped,
// as tokenizers does (SmolLM's vocabulary lacks a few control bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/hf_json_fields.h"
#include "kuiper/tokenizer/pair_merge.h"

namespace kuiper::hf {

class BpeModel {
 public:
  static StatusOr<BpeModel> parse(const json& model, const std::string& path);

  // Appends the ids of one pre-tokenized piece.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> find(std::string_view token) const;
  // The vocab string of `id`, or nullptr if no vocab entry has it.
  const std::string* token(int32_t id) const;
  // Number of vocab entries (tokenizers numbers new added tokens from here).
  int32_t entry_count() const { return static_cast<int32_t>(ids_.size()); }
  int32_t max_id() const { return max_id_; }

 private:
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  Status parse_vocab(const json& vocab, const std::string& path);
  Status parse_merges(const json& merges, const std::string& path);
  std::optional<PairMerge> merge(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t, TransparentHash, std::equal_to<>> ids_;
  std::unordered_map<int32_t, std::string> tokens_;
  std::unordered_map<uint64_t, PairMerge> merges_;
  int32_t max_id_ = -1;
  int32_t byte_ids_[256];  // the "<0xNN>" tokens, -1 where the vocab lacks one
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
};

}  // namespace kuiper::hf
