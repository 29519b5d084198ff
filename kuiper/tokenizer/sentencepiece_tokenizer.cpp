// SentencePiece .model files (LLaMA 2, tok512), through libsentencepiece. Encoding is the
// library's; token_bytes reproduces the library's DecodeIds piece by piece so that streaming
// output equals whole-sequence decoding.
#include <exception>

#include <sentencepiece_processor.h>

#include "kuiper/tokenizer/byte_piece.h"
#include "kuiper/tokenizer/special_tokens.h"
#include "kuiper/tokenizer/tokenizer_formats.h"

namespace kuiper {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // "▁", SentencePiece's space

std::string replace_space_symbols(std::string_view piece) {
  std::string out;
  while (!piece.empty()) {
    if (piece.substr(0, kSpaceSymbol.size()) == kSpaceSymbol) {
      out += ' ';
      piece.remove_prefix(kSpaceSymbol.size());
    } else {
      out += piece[0];
      piece.remove_prefix(1);
    }
  }
  return out;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> load(std::string_view content,
                                                   const std::string& path) {
    auto tokenizer = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
    sentencepiece::SentencePieceProcessor& sp = tokenizer->processor_;
    sentencepiece::util::Status status;
    try {
      status = sp.LoadFromSerializedProto(content);
    } catch (const std::exception& e) {
      // libsentencepiece throws on some malformed models (its trie builder refuses an empty
      // piece) instead of returning a status; found by fuzz_tokenizer_file_sentencepiece.
      return invalid_format(path + ": not a valid SentencePiece model (" + e.what() + ")");
    }
    if (!status.ok()) {
      return invalid_format(path + ": not a valid SentencePiece model (" + status.ToString() + ")");
    }
    if (sp.bos_id() < 0 || sp.eos_id() < 0) {
      return invalid_format(path + ": SentencePiece model has no <s> or </s> piece");
    }
    tokenizer->prepare_surfaces();
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  StatusOr<std::vector<int32_t>> encode(std::string_view text,
                                        const EncodeOptions& options) const override {
    std::vector<int32_t> ids;
    if (options.add_bos) ids.push_back(processor_.bos_id());
    if (!options.allow_special) {
      KUIPER_RETURN_IF_ERROR(encode_plain(text, ids));
      return ids;
    }
    // Each stretch between special tokens is encoded on its own (and so gets its own dummy
    // prefix), which is how LLaMA 2 chat prompts are assembled from separately encoded turns.
    for (const TextSegment& segment : specials_.split(text)) {
      if (segment.special_id >= 0) {
        ids.push_back(segment.special_id);
      } else {
        KUIPER_RETURN_IF_ERROR(encode_plain(segment.text, ids));
      }
    }
    return ids;
  }

  std::string token_bytes(int32_t id, int32_t previous) const override {
    if (id < 0 || id >= vocab_size()) return {};
    const std::string& surface = surfaces_[id];
    // SentencePiece drops the space its encoder put in front of the text (the dummy prefix)
    // from the first piece; after <s> or at the very start is where that piece is.
    const bool at_start = previous < 0 || previous == processor_.bos_id();
    if (at_start && strips_dummy_prefix_ && starts_with_space_symbol_[id]) {
      return surface.substr(1);
    }
    return surface;
  }

  int32_t vocab_size() const override { return processor_.GetPieceSize(); }
  int32_t bos_id() const override { return processor_.bos_id(); }
  std::vector<int32_t> eos_ids() const override { return {processor_.eos_id()}; }
  std::optional<int32_t> special_token(std::string_view text) const override {
    return specials_.find(text);
  }
  std::string kind() const override { return "sentencepiece"; }

 private:
  SentencePieceTokenizer() = default;

  Status encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
    std::vector<int> piece_ids;
    const auto status = processor_.Encode(text, &piece_ids);
    if (!status.ok()) return invalid_argument("SentencePiece encode failed: " + status.ToString());
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    return ok_status();
  }

  // The decoded text of every piece, worked out once: control pieces are invisible, the
  // unknown piece shows as the library's " ⁇ ", byte pieces are their byte.
  void prepare_surfaces() {
    const int n = processor_.GetPieceSize();
    surfaces_.resize(n);
    starts_with_space_symbol_.assign(n, false);
    for (int id = 0; id < n; ++id) {
      const std::string& piece = processor_.IdToPiece(id);
      if (processor_.IsControl(id)) {
        specials_.add(piece, id);
      } else if (processor_.IsUnknown(id)) {
        specials_.add(piece, id);
        surfaces_[id] = processor_.DecodeIds({id});
      } else if (processor_.IsByte(id) && parse_byte_piece(piece)) {
        surfaces_[id] = std::string(1, static_cast<char>(*parse_byte_piece(piece)));
      } else {
        surfaces_[id] = replace_space_symbols(piece);
        starts_with_space_symbol_[id] = piece.starts_with(kSpaceSymbol);
      }
    }
    // Whether the decoder drops the dummy-prefix space of the first piece depends on flags of
    // the model proto, which the installed headers do not expose; decoding one "▁..." piece
    // alone shows it directly.
    for (int id = 0; id < n; ++id) {
      if (starts_with_space_symbol_[id]) {
        strips_dummy_prefix_ = processor_.DecodeIds({id}).size() < surfaces_[id].size();
        break;
      }
    }
  }

  sentencepiece::SentencePieceProcessor processor_;
  std::vector<std::string> surfaces_;
  std::vector<bool> starts_with_space_symbol_;
  bool strips_dummy_prefix_ = false;
  SpecialTokens specials_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(std::string_view content,
                                                                  const std::string& path) {
  return SentencePieceTokenizer::load(content, path);
}

}  // namespace kuiper
