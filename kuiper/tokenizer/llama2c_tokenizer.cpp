// llama2.c's tokenizer.bin: int32 max_token_length, then for every token a float score, an
// int32 byte length and the bytes. Encoding follows run.c's encode(): a dummy-prefix " " for
// non-empty text, one token per UTF-8 character (or its bytes, as tokens byte+3, when the
// character is not in the vocabulary), then merging the adjacent pair that forms the
// highest-scoring token until none does.
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "kuiper/tokenizer/byte_piece.h"
#include "kuiper/tokenizer/pair_merge.h"
#include "kuiper/tokenizer/special_tokens.h"
#include "kuiper/tokenizer/tokenizer_formats.h"

namespace kuiper {
namespace {

// Fixed by llama2.c (the file does not record them): ids 0..2, then 256 byte tokens from 3.
constexpr int32_t kUnkId = 0;
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kFirstByteId = 3;

bool is_continuation_byte(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

class Llama2cTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> load(std::string_view content,
                                                   const std::string& path) {
    auto tokenizer = std::unique_ptr<Llama2cTokenizer>(new Llama2cTokenizer());
    KUIPER_RETURN_IF_ERROR(tokenizer->parse(content, path));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  StatusOr<std::vector<int32_t>> encode(std::string_view text,
                                        const EncodeOptions& options) const override {
    std::vector<int32_t> ids;
    if (options.add_bos) ids.push_back(kBosId);
    if (!options.allow_special) {
      append_encoded(text, ids);
      return ids;
    }
    for (const TextSegment& segment : specials_.split(text)) {
      if (segment.special_id >= 0) {
        ids.push_back(segment.special_id);
      } else {
        append_encoded(segment.text, ids);
      }
    }
    return ids;
  }

  std::string token_bytes(int32_t id, int32_t previous) const override {
    if (id < 0 || id >= vocab_size() || id == kBosId || id == kEosId) return {};
    const std::string& piece = pieces_[id];
    if (const auto byte = parse_byte_piece(piece)) return std::string(1, static_cast<char>(*byte));
    // As run.c (and SentencePiece): the dummy-prefix space of the first piece is not output.
    if ((previous < 0 || previous == kBosId) && piece.starts_with(' ')) return piece.substr(1);
    return piece;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return kBosId; }
  std::vector<int32_t> eos_ids() const override { return {kEosId}; }
  std::optional<int32_t> special_token(std::string_view text) const override {
    return specials_.find(text);
  }
  std::string kind() const override { return "llama2c-bin"; }

 private:
  Llama2cTokenizer() = default;

  Status parse(std::string_view content, const std::string& path) {
    size_t offset = 0;
    auto read_int32 = [&](int32_t* value) {
      std::memcpy(value, content.data() + offset, 4);
      offset += 4;
    };
    if (content.size() < 4) {
      return invalid_format(path + ": truncated tokenizer.bin: " + std::to_string(content.size()) +
                            " bytes, the header needs 4");
    }
    int32_t max_token_length;
    read_int32(&max_token_length);
    if (max_token_length <= 0) {
      return invalid_format(path + ": not a tokenizer.bin: max_token_length " +
                            std::to_string(max_token_length));
    }
    while (offset < content.size()) {
      const std::string where = path + ": token " + std::to_string(pieces_.size()) +
                                " at byte offset " + std::to_string(offset);
      if (content.size() - offset < 8) {
        return invalid_format(where + ": truncated tokenizer.bin (entry header needs 8 bytes, " +
                              std::to_string(content.size() - offset) + " left)");
      }
      float score;
      std::memcpy(&score, content.data() + offset, 4);
      offset += 4;
      int32_t length;
      read_int32(&length);
      if (!std::isfinite(score) || length < 0 || length > max_token_length) {
        return invalid_format(where + ": corrupt entry (score " + std::to_string(score) +
                              ", length " + std::to_string(length) + ", max_token_length " +
                              std::to_string(max_token_length) + ")");
      }
      if (content.size() - offset < static_cast<size_t>(length)) {
        return invalid_format(where + ": truncated tokenizer.bin (token needs " +
                              std::to_string(length) + " bytes, " +
                              std::to_string(content.size() - offset) + " left)");
      }
      pieces_.emplace_back(content.substr(offset, length));
      scores_.push_back(score);
      offset += length;
    }
    if (pieces_.size() < kFirstByteId + 256) {
      return invalid_format(path + ": tokenizer.bin has " + std::to_string(pieces_.size()) +
                            " tokens; llama2.c's layout needs at least 259 (3 special + 256 bytes)");
    }
    // A duplicated string resolves to its first id.
    for (size_t id = 0; id < pieces_.size(); ++id) ids_.try_emplace(pieces_[id], id);
    if (const auto it = ids_.find(" "); it != ids_.end()) dummy_prefix_id_ = it->second;
    specials_.add("<unk>", kUnkId);
    specials_.add("<s>", kBosId);
    specials_.add("</s>", kEosId);
    return ok_status();
  }

  std::optional<int32_t> find(const std::string& piece) const {
    const auto it = ids_.find(piece);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

  void append_encoded(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<int32_t> ids;
    if (!text.empty() && dummy_prefix_id_ >= 0) ids.push_back(dummy_prefix_id_);
    // Characters are cut as run.c cuts them: a byte and the continuation bytes after it, at
    // most four; so a stray continuation byte starts a "character" of its own.
    size_t pos = 0;
    while (pos < text.size()) {
      size_t length = 1;
      while (length < 4 && pos + length < text.size() && is_continuation_byte(text[pos + length])) {
        ++length;
      }
      const std::string character(text.substr(pos, length));
      if (const auto id = find(character)) {
        ids.push_back(*id);
      } else {
        for (const char byte : character) ids.push_back(kFirstByteId + static_cast<uint8_t>(byte));
      }
      pos += length;
    }
    merge_pairs(ids, [this](int32_t left, int32_t right) -> std::optional<PairMerge> {
      const auto merged = find(pieces_[left] + pieces_[right]);
      if (!merged) return std::nullopt;
      return PairMerge{-static_cast<double>(scores_[*merged]), *merged};  // best score first
    });
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> ids_;
  int32_t dummy_prefix_id_ = -1;
  SpecialTokens specials_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(std::string_view content,
                                                            const std::string& path) {
  return Llama2cTokenizer::load(content, path);
}

}  // namespace kuiper
