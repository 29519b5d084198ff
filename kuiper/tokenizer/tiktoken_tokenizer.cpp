// LLaMA 3's tokenizer.model: tiktoken's rank file, one "base64(token bytes) rank" per line.
// A token's id is its rank, and BPE merges the adjacent pair whose concatenation has the
// lowest rank. The special tokens are not in the file; they follow the ranks as Meta's
// tokenizer.py (Llama 3.1 and later) names them.
#include <charconv>

#include "kuiper/tokenizer/base64.h"
#include "kuiper/tokenizer/byte_level_bpe.h"
#include "kuiper/tokenizer/special_tokens.h"
#include "kuiper/tokenizer/tokenizer_formats.h"

namespace kuiper {
namespace {

constexpr int kNumSpecialTokens = 256;

// Meta's list: eleven named tokens, then "<|reserved_special_token_N|>" with N counting on
// from 3 up to the 256th special token. (Llama 3.0 named 128004/5/8/10 reserved_2/3/4/5 and
// numbered the rest from 5; the ids that matter — 128000/1/6/7/9 — are the same in both.)
std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> names = {
      "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
      "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
      "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  for (int n = 3; names.size() < kNumSpecialTokens; ++n) {
    names.push_back("<|reserved_special_token_" + std::to_string(n) + "|>");
  }
  return names;
}

std::vector<std::string_view> split_lines(std::string_view content) {
  std::vector<std::string_view> lines;
  while (!content.empty()) {
    const size_t end = content.find('\n');
    std::string_view line = content.substr(0, end);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos) break;
    content.remove_prefix(end + 1);
  }
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

class TiktokenTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> load(std::string_view content,
                                                   const std::string& path) {
    auto tokenizer = std::unique_ptr<TiktokenTokenizer>(new TiktokenTokenizer());
    KUIPER_RETURN_IF_ERROR(tokenizer->parse(content, path));
    KUIPER_ASSIGN_OR_RETURN(tokenizer->splitter_, RegexSplitter::compile(kLlama3SplitPattern));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  StatusOr<std::vector<int32_t>> encode(std::string_view text,
                                        const EncodeOptions& options) const override {
    const ByteLevelBpe bpe{vocabulary_, *splitter_,
                           [this](int32_t left, int32_t right) { return merge(left, right); },
                           /*whole_piece_first=*/true};
    std::vector<int32_t> ids;
    if (options.add_bos) ids.push_back(bos_id());
    if (!options.allow_special) {
      KUIPER_RETURN_IF_ERROR(bpe.encode(text, ids));
      return ids;
    }
    KUIPER_RETURN_IF_ERROR(specials_.encode(text, ids, [&](std::string_view plain, std::vector<int32_t>& out) {
      return bpe.encode(plain, out);
    }));
    return ids;
  }

  std::string token_bytes(int32_t id, int32_t /*previous*/) const override {
    if (id >= num_base_tokens_ && id < vocab_size()) return special_names_[id - num_base_tokens_];
    return vocabulary_.bytes(id);
  }

  int32_t vocab_size() const override { return num_base_tokens_ + kNumSpecialTokens; }
  int32_t bos_id() const override { return *special_token("<|begin_of_text|>"); }
  std::vector<int32_t> eos_ids() const override {
    return {*special_token("<|end_of_text|>"), *special_token("<|eot_id|>")};
  }
  std::optional<int32_t> special_token(std::string_view text) const override {
    return specials_.find(text);
  }
  std::string kind() const override { return "tiktoken"; }

 private:
  TiktokenTokenizer() = default;

  Status parse(std::string_view content, const std::string& path) {
    const std::vector<std::string_view> lines = split_lines(content);
    num_base_tokens_ = static_cast<int32_t>(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string where = path + " line " + std::to_string(i + 1);
      const std::string_view line = lines[i];
      const size_t space = line.find(' ');
      if (space == std::string_view::npos) {
        return invalid_format(where + ": expected \"<base64 token> <rank>\"");
      }
      const auto bytes = decode_base64(line.substr(0, space));
      if (!bytes) return invalid_format(where + ": token is not valid base64");
      const std::string_view rank_text = line.substr(space + 1);
      int32_t rank = -1;
      const auto [end, error] =
          std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
      if (error != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0 ||
          rank >= num_base_tokens_) {
        return invalid_format(where + ": rank \"" + std::string(rank_text) +
                              "\" is not a number in [0, " + std::to_string(num_base_tokens_) +
                              ")");
      }
      if (!vocabulary_.add(rank, *bytes)) {
        return invalid_format(where + ": rank " + std::to_string(rank) +
                              " or its token appears twice");
      }
    }
    if (lines.empty()) return invalid_format(path + ": tiktoken file has no ranks");
    KUIPER_RETURN_IF_ERROR(vocabulary_.check_complete(path));
    special_names_ = llama3_special_tokens();
    for (int i = 0; i < kNumSpecialTokens; ++i) {
      specials_.add(special_names_[i], num_base_tokens_ + i);
    }
    return ok_status();
  }

  // tiktoken's rule: a pair merges into the token of its concatenated bytes, lowest rank first.
  std::optional<PairMerge> merge(int32_t left, int32_t right) const {
    thread_local std::string joined;
    joined.assign(vocabulary_.bytes(left));
    joined.append(vocabulary_.bytes(right));
    const auto rank = vocabulary_.find(joined);
    if (!rank) return std::nullopt;
    return PairMerge{static_cast<double>(*rank), *rank};
  }

  ByteVocabulary vocabulary_;
  int32_t num_base_tokens_ = 0;
  std::vector<std::string> special_names_;
  SpecialTokens specials_;
  std::shared_ptr<const RegexSplitter> splitter_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_tiktoken_tokenizer(std::string_view content,
                                                            const std::string& path) {
  return TiktokenTokenizer::load(content, path);
}

}  // namespace kuiper
