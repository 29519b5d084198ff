// HF tokenizer.json with a byte-level BPE model (LLaMA 3, Qwen, GPT-2 style): model.vocab and
// model.merges over GPT-2's byte alphabet, added_tokens, and a pre-tokenizer that is a regex
// Split plus ByteLevel (or ByteLevel doing its own GPT-2 split). A pair merges by its position
// in model.merges, lowest first. Anything else in the file that would change the ids
// (normalizers, other pre-tokenizers, subword prefixes) is refused rather than ignored.
#include <nlohmann/json.hpp>

#include "kuiper/tokenizer/byte_level_alphabet.h"
#include "kuiper/tokenizer/byte_level_bpe.h"
#include "kuiper/tokenizer/special_tokens.h"
#include "kuiper/tokenizer/tokenizer_formats.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

// When the post-processor does not say which token starts a sequence, these names do.
constexpr std::string_view kBosNames[] = {"<|begin_of_text|>", "<s>", "<|startoftext|>"};
constexpr std::string_view kEosNames[] = {"<|end_of_text|>", "<|eot_id|>", "</s>",
                                          "<|endoftext|>", "<|im_end|>"};

bool is_null_or_empty(const json& value) {
  return value.is_null() || (value.is_string() && value.get<std::string>().empty());
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The token the post-processor's template puts first, e.g. "<|begin_of_text|>".
std::optional<std::string> template_first_special(const json& processor) {
  if (!processor.is_object()) return std::nullopt;
  if (processor.value("type", "") == "Sequence" && processor.contains("processors")) {
    for (const json& inner : processor["processors"]) {
      if (auto name = template_first_special(inner)) return name;
    }
    return std::nullopt;
  }
  if (processor.value("type", "") != "TemplateProcessing" || !processor.contains("single")) {
    return std::nullopt;
  }
  const json& single = processor["single"];
  if (!single.is_array() || single.empty() || !single[0].contains("SpecialToken")) {
    return std::nullopt;
  }
  return single[0]["SpecialToken"].value("id", "");
}

class HfBpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> load(std::string_view content,
                                                   const std::string& path) {
    json root = json::parse(content, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object()) {
      return invalid_format(path + ": not valid JSON");
    }
    auto tokenizer = std::unique_ptr<HfBpeTokenizer>(new HfBpeTokenizer());
    // nlohmann throws on type mismatches deep inside the file; the library must not throw.
    try {
      KUIPER_RETURN_IF_ERROR(tokenizer->parse(root, path));
    } catch (const json::exception& e) {
      return invalid_format(path + ": unexpected tokenizer.json layout: " + e.what());
    }
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  StatusOr<std::vector<int32_t>> encode(std::string_view text,
                                        const EncodeOptions& options) const override {
    const ByteLevelBpe bpe{vocabulary_, *splitter_,
                           [this](int32_t left, int32_t right) { return merge(left, right); },
                           ignore_merges_};
    std::vector<int32_t> ids;
    if (options.add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
    // HF always matches added tokens not marked special; special ones only when allowed.
    const SpecialTokens& recognised = options.allow_special ? all_added_ : plain_added_;
    KUIPER_RETURN_IF_ERROR(recognised.encode(text, ids, [&](std::string_view plain, std::vector<int32_t>& out) {
      return bpe.encode(plain, out);
    }));
    return ids;
  }

  std::string token_bytes(int32_t id, int32_t /*previous*/) const override {
    if (const auto it = added_text_.find(id); it != added_text_.end()) return it->second;
    return vocabulary_.bytes(id);
  }

  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  std::optional<int32_t> special_token(std::string_view text) const override {
    return all_added_.find(text);
  }
  std::string kind() const override { return "hf-bpe"; }

 private:
  HfBpeTokenizer() = default;

  Status parse(const json& root, const std::string& path) {
    const json& model = root.at("model");
    if (model.value("type", "BPE") != "BPE") {
      return unsupported(path + ": model type " + model.value("type", "") + " (only BPE is supported)");
    }
    if (model.value("byte_fallback", false) || !is_null_or_empty(model.value("continuing_subword_prefix", json())) ||
        !is_null_or_empty(model.value("end_of_word_suffix", json())) || !model.value("dropout", json()).is_null()) {
      return unsupported(path + ": BPE options byte_fallback/subword prefix/suffix/dropout are not supported");
    }
    if (!root.value("normalizer", json()).is_null()) {
      return unsupported(path + ": normalizers are not supported (byte-level BPE needs none)");
    }
    ignore_merges_ = model.value("ignore_merges", false);
    KUIPER_RETURN_IF_ERROR(parse_added_tokens(root.value("added_tokens", json::array()), path));
    KUIPER_RETURN_IF_ERROR(parse_vocab(model.at("vocab"), path));
    KUIPER_RETURN_IF_ERROR(parse_merges(model.at("merges"), path));
    KUIPER_RETURN_IF_ERROR(parse_pre_tokenizer(root.value("pre_tokenizer", json()), path));
    choose_bos_and_eos(root.value("post_processor", json()));
    return ok_status();
  }

  Status parse_added_tokens(const json& added, const std::string& path) {
    for (const json& token : added) {
      const std::string content = token.at("content").get<std::string>();
      const int32_t id = token.at("id").get<int32_t>();
      if (token.value("lstrip", false) || token.value("rstrip", false) ||
          token.value("single_word", false)) {
        return unsupported(path + ": added token " + content +
                           " uses lstrip/rstrip/single_word, which are not supported");
      }
      all_added_.add(content, id);
      if (!token.value("special", false)) plain_added_.add(content, id);
      added_text_[id] = content;
      vocab_size_ = std::max(vocab_size_, id + 1);
    }
    return ok_status();
  }

  Status parse_vocab(const json& vocab, const std::string& path) {
    for (const auto& [text, id_value] : vocab.items()) {
      const int32_t id = id_value.get<int32_t>();
      vocab_size_ = std::max(vocab_size_, id + 1);
      // Added tokens are matched as whole strings, never built by merging, so they stay out
      // of the byte vocabulary.
      if (added_text_.contains(id)) continue;
      const auto bytes = byte_level_to_bytes(text);
      if (!bytes) {
        return invalid_format(path + ": vocab entry \"" + text +
                              "\" is not in the byte-level alphabet");
      }
      if (!vocabulary_.add(id, *bytes)) {
        return invalid_format(path + ": vocab entry \"" + text + "\" (id " + std::to_string(id) +
                              ") duplicates another");
      }
    }
    return vocabulary_.check_complete(path);
  }

  // Merges come as "left right" strings or as ["left", "right"] arrays (newer files).
  Status parse_merges(const json& merges, const std::string& path) {
    int32_t rank = 0;
    for (const json& merge : merges) {
      std::string left, right;
      if (merge.is_string()) {
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ');
        if (space == std::string::npos) {
          return invalid_format(path + ": merge " + std::to_string(rank) + " \"" + text +
                                "\" is not \"left right\"");
        }
        left = text.substr(0, space);
        right = text.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2) {
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        return invalid_format(path + ": merge " + std::to_string(rank) + " is neither a string nor a pair");
      }
      const auto left_bytes = byte_level_to_bytes(left);
      const auto right_bytes = byte_level_to_bytes(right);
      const auto left_id = left_bytes ? vocabulary_.find(*left_bytes) : std::nullopt;
      const auto right_id = right_bytes ? vocabulary_.find(*right_bytes) : std::nullopt;
      const auto merged_id =
          left_id && right_id ? vocabulary_.find(*left_bytes + *right_bytes) : std::nullopt;
      if (!merged_id) {
        return invalid_format(path + ": merge " + std::to_string(rank) + " (" + left + " " +
                              right + ") uses or makes a token not in the vocab");
      }
      // The first listing of a pair is the one that counts.
      merges_.try_emplace(pair_key(*left_id, *right_id), PairMerge{double(rank), *merged_id});
      ++rank;
    }
    return ok_status();
  }

  Status parse_pre_tokenizer(const json& pre, const std::string& path) {
    std::vector<json> steps;
    if (pre.is_object() && pre.value("type", "") == "Sequence") {
      for (const json& step : pre.at("pretokenizers")) steps.push_back(step);
    } else if (pre.is_object()) {
      steps.push_back(pre);
    }
    std::optional<std::string> pattern;
    bool byte_level = false;
    for (const json& step : steps) {
      const std::string type = step.value("type", "");
      if (type == "Split" && !pattern && !byte_level && step.at("pattern").contains("Regex") &&
          step.value("behavior", "") == "Isolated" && !step.value("invert", false)) {
        pattern = step["pattern"]["Regex"].get<std::string>();
      } else if (type == "ByteLevel" && !byte_level && !step.value("add_prefix_space", false)) {
        byte_level = true;
        if (step.value("use_regex", true)) {
          if (pattern) return unsupported(path + ": a Split followed by a splitting ByteLevel");
          pattern = std::string(kGpt2SplitPattern);
        }
      } else {
        return unsupported(path + ": pre-tokenizer step " + step.dump() +
                           " (supported: Regex Split [Isolated] + ByteLevel without prefix space)");
      }
    }
    if (!byte_level || !pattern) {
      return unsupported(path + ": pre-tokenizer is not byte-level BPE's regex split + ByteLevel");
    }
    KUIPER_ASSIGN_OR_RETURN(splitter_, RegexSplitter::compile(*pattern));
    return ok_status();
  }

  void choose_bos_and_eos(const json& post_processor) {
    std::optional<int32_t> bos;
    if (const auto name = template_first_special(post_processor)) bos = all_added_.find(*name);
    for (const std::string_view name : kBosNames) {
      if (!bos) bos = all_added_.find(name);
    }
    bos_id_ = bos.value_or(-1);
    for (const std::string_view name : kEosNames) {
      if (const auto id = all_added_.find(name)) eos_ids_.push_back(*id);
    }
  }

  std::optional<PairMerge> merge(int32_t left, int32_t right) const {
    const auto it = merges_.find(pair_key(left, right));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  }

  ByteVocabulary vocabulary_;
  std::unordered_map<uint64_t, PairMerge> merges_;
  bool ignore_merges_ = false;
  SpecialTokens all_added_;    // every added token
  SpecialTokens plain_added_;  // added tokens not marked special
  std::unordered_map<int32_t, std::string> added_text_;
  std::shared_ptr<const RegexSplitter> splitter_;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;  // -1: this vocabulary has no beginning-of-sequence token
  std::vector<int32_t> eos_ids_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_hf_bpe_tokenizer(std::string_view content,
                                                          const std::string& path) {
  return HfBpeTokenizer::load(content, path);
}

}  // namespace kuiper
