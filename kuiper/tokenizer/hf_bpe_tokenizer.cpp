// HF tokenizer.json with a BPE model, as the `tokenizers` library runs it: added tokens are
// cut out of the raw text (or, for normalized ones, out of the normalized text), each stretch
// between them is normalized, pre-tokenized and BPE-encoded, and the post-processor's template
// adds BOS/EOS when asked. Decoding runs the file's decoder chain one token at a time.
// Components outside the LLaMA-family scope are refused by name, never ignored.
#include <nlohmann/json.hpp>

#include "kuiper/tokenizer/hf_added_tokens.h"
#include "kuiper/tokenizer/hf_bpe_model.h"
#include "kuiper/tokenizer/hf_decoder.h"
#include "kuiper/tokenizer/hf_normalizer.h"
#include "kuiper/tokenizer/hf_pre_tokenizer.h"
#include "kuiper/tokenizer/hf_tokenizer_json.h"
#include "kuiper/tokenizer/tokenizer_formats.h"
#include "kuiper/tokenizer/utf8.h"

namespace kuiper {
namespace {

using hf::json;

// When the post-processor adds no BOS, these names say which token starts a sequence (for
// chat templates and perplexity); the EOS names end generation.
constexpr std::string_view kBosNames[] = {"<|begin_of_text|>", "<s>", "<|startoftext|>"};
constexpr std::string_view kEosNames[] = {"<|end_of_text|>", "<|eot_id|>", "</s>",
                                          "<|endoftext|>", "<|im_end|>"};

// What the post-processor puts around the encoded text.
struct Template {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

Status parse_template(const json& processor, const std::string& path, Template& out) {
  const std::string where = path + ": post_processor TemplateProcessing";
  const json single = processor.value("single", json());
  const json specials = processor.value("special_tokens", json::object());
  if (!single.is_array()) return invalid_format(where + " has no \"single\" template");
  Template inner;
  bool seen_sequence = false;
  for (const json& item : single) {
    if (item.is_object() && item.contains("Sequence")) {
      KUIPER_ASSIGN_OR_RETURN(const std::string name, hf::string_field(item["Sequence"], "id", where));
      if (name != "A" || seen_sequence) return unsupported(where + ": single template must hold $A once");
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken")) return invalid_format(where + ": unknown template piece");
    KUIPER_ASSIGN_OR_RETURN(const std::string name, hf::string_field(item["SpecialToken"], "id", where));
    if (!specials.is_object() || !specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array()) {
      return invalid_format(where + ": special token \"" + name + "\" has no ids in special_tokens");
    }
    for (const json& id : specials[name]["ids"]) {
      KUIPER_ASSIGN_OR_RETURN(const int32_t value, hf::token_id(id, where + " special token \"" + name + "\""));
      (seen_sequence ? inner.suffix : inner.prefix).push_back(value);
    }
  }
  if (!seen_sequence) return unsupported(where + ": single template has no $A");
  out.prefix.insert(out.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
  out.suffix.insert(out.suffix.end(), inner.suffix.begin(), inner.suffix.end());
  return ok_status();
}

// TemplateProcessing adds ids; ByteLevel only adjusts offsets; Sequence applies each in turn.
Status parse_post_processor(const json& processor, const std::string& path, Template& out) {
  if (processor.is_null()) return ok_status();
  const std::string type = hf::type_of(processor);
  if (type == "TemplateProcessing") return parse_template(processor, path, out);
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence") {
    KUIPER_ASSIGN_OR_RETURN(const std::vector<json> steps,
                            hf::component_steps(processor, "processors", path + ": post_processor"));
    for (const json& step : steps) KUIPER_RETURN_IF_ERROR(parse_post_processor(step, path, out));
    return ok_status();
  }
  return unsupported(path + ": post_processor \"" + type +
                     "\" is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
}

class HfBpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> load(const json& root, const std::string& path) {
    if (!root.is_object()) return invalid_format(path + ": not a tokenizer.json object");
    auto tokenizer = std::unique_ptr<HfBpeTokenizer>(new HfBpeTokenizer());
    // nlohmann throws on type mismatches deep inside the file; the library must not throw.
    try {
      KUIPER_RETURN_IF_ERROR(tokenizer->parse(root, path));
    } catch (const json::exception& e) {
      return invalid_format(path + ": unexpected tokenizer.json layout: " + e.what());
    }
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  StatusOr<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options) const override {
    // tokenizers takes only str; bytes that are not UTF-8 have no encoding there either.
    if (!utf8::is_valid(text)) return invalid_argument("text to encode is not valid UTF-8");
    std::vector<int32_t> ids;
    if (options.add_bos) ids = template_.prefix;
    for (const hf::TextSegment& raw : raw_added_.split(text, options.allow_special)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      KUIPER_ASSIGN_OR_RETURN(const std::string normalized, normalizer_.apply(std::string(raw.text)));
      for (const hf::TextSegment& part : normalized_added_.split(normalized, options.allow_special)) {
        if (part.id >= 0) {
          ids.push_back(part.id);
          continue;
        }
        std::vector<hf::Piece> pieces{{std::string(part.text), raw.start == 0 && part.start == 0}};
        KUIPER_ASSIGN_OR_RETURN(pieces, pre_tokenizer_.apply(std::move(pieces)));
        for (const hf::Piece& piece : pieces) model_.encode(piece.text, ids);
      }
    }
    if (options.add_bos) ids.insert(ids.end(), template_.suffix.begin(), template_.suffix.end());
    return ids;
  }

  std::string token_bytes(int32_t id, int32_t previous) const override {
    if (const auto it = added_decoded_.find(id); it != added_decoded_.end()) {
      return decoder_.decode(it->second, previous < 0);
    }
    const std::string* token = model_.token(id);
    return token == nullptr ? std::string() : decoder_.decode(*token, previous < 0);
  }

  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  std::optional<int32_t> special_token(std::string_view text) const override {
    const auto it = added_ids_.find(std::string(text));
    if (it == added_ids_.end()) return std::nullopt;
    return it->second;
  }
  std::string kind() const override { return "hf-bpe"; }

 private:
  HfBpeTokenizer() = default;

  Status parse(const json& root, const std::string& path) {
    if (root.contains("version") && root["version"] != "1.0") {
      return unsupported(path + ": tokenizer.json version " + root["version"].dump() + " (only 1.0)");
    }
    KUIPER_ASSIGN_OR_RETURN(model_, hf::BpeModel::parse(root.value("model", json()), path));
    KUIPER_ASSIGN_OR_RETURN(normalizer_, hf::Normalizer::parse(root.value("normalizer", json()), path));
    KUIPER_ASSIGN_OR_RETURN(pre_tokenizer_, hf::PreTokenizer::parse(root.value("pre_tokenizer", json()), path));
    KUIPER_ASSIGN_OR_RETURN(decoder_, hf::Decoder::parse(root.value("decoder", json()), path));
    KUIPER_RETURN_IF_ERROR(parse_post_processor(root.value("post_processor", json()), path, template_));
    vocab_size_ = model_.max_id() + 1;
    KUIPER_RETURN_IF_ERROR(parse_added_tokens(root.value("added_tokens", json::array()), path));
    for (const int32_t id : template_.prefix) vocab_size_ = std::max(vocab_size_, id + 1);
    for (const int32_t id : template_.suffix) vocab_size_ = std::max(vocab_size_, id + 1);
    choose_bos_and_eos();
    return ok_status();
  }

  // tokenizers gives an added token the id of the same string in the vocab, else the next id
  // after the vocab; a file whose ids say otherwise would encode differently there, so it is
  // refused.
  Status parse_added_tokens(const json& added, const std::string& path) {
    if (!added.is_array()) return invalid_format(path + ": added_tokens is not a list");
    int32_t next_id = model_.entry_count();
    for (const json& entry : added) {
      const std::string where = path + ": added token";
      KUIPER_ASSIGN_OR_RETURN(const std::string content, hf::string_field(entry, "content", where));
      if (!entry.contains("id")) return invalid_format(where + " \"" + content + "\" has no id");
      KUIPER_ASSIGN_OR_RETURN(const int32_t file_id, hf::token_id(entry["id"], where + " \"" + content + "\""));
      if (content.empty()) continue;
      if (!utf8::is_valid(content)) return invalid_format(where + " with id " + std::to_string(file_id) + " is not UTF-8");
      hf::AddedToken token{.content = content};
      KUIPER_ASSIGN_OR_RETURN(token.special, hf::bool_field(entry, "special", where, false));
      KUIPER_ASSIGN_OR_RETURN(token.lstrip, hf::bool_field(entry, "lstrip", where, false));
      KUIPER_ASSIGN_OR_RETURN(token.rstrip, hf::bool_field(entry, "rstrip", where, false));
      KUIPER_ASSIGN_OR_RETURN(token.single_word, hf::bool_field(entry, "single_word", where, false));
      KUIPER_ASSIGN_OR_RETURN(token.normalized, hf::bool_field(entry, "normalized", where, !token.special));
      if (const auto it = added_ids_.find(content); it != added_ids_.end()) {
        token.id = it->second;
      } else if (const auto vocab_id = model_.find(content)) {
        token.id = *vocab_id;
      } else {
        token.id = next_id++;
      }
      if (token.id != file_id) {
        return invalid_format(where + " \"" + content + "\" has id " + std::to_string(file_id) +
                              ", but the tokenizers library would give it id " + std::to_string(token.id));
      }
      added_ids_[content] = token.id;
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      if (token.normalized) {
        // Found in normalized text by its normalized form, which is also what tokenizers hands
        // the decoder (LLaMA-2-hf's "</s>" is "▁</s>" there, so it decodes to " </s>").
        KUIPER_ASSIGN_OR_RETURN(std::string pattern, normalizer_.apply(content));
        added_decoded_[token.id] = pattern;
        normalized_added_.add(std::move(pattern), token);
      } else {
        added_decoded_[token.id] = content;
        raw_added_.add(content, token);
      }
    }
    return ok_status();
  }

  void choose_bos_and_eos() {
    std::optional<int32_t> bos;
    if (!template_.prefix.empty()) bos = template_.prefix.front();
    for (const std::string_view name : kBosNames) {
      if (!bos) bos = special_token(name);
    }
    bos_id_ = bos.value_or(-1);
    for (const std::string_view name : kEosNames) {
      if (const auto id = special_token(name)) eos_ids_.push_back(*id);
    }
  }

  hf::BpeModel model_;
  hf::Normalizer normalizer_;
  hf::PreTokenizer pre_tokenizer_;
  hf::Decoder decoder_;
  Template template_;
  hf::AddedTokenMatcher raw_added_;         // added tokens with normalized = false
  hf::AddedTokenMatcher normalized_added_;  // the others, by their normalized content
  std::unordered_map<std::string, int32_t> added_ids_;
  std::unordered_map<int32_t, std::string> added_decoded_;  // what the decoder is given
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;  // -1: this vocabulary has no beginning-of-sequence token
  std::vector<int32_t> eos_ids_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(const json& document, const std::string& source) {
  return HfBpeTokenizer::load(document, source);
}

StatusOr<std::unique_ptr<Tokenizer>> load_hf_bpe_tokenizer(std::string_view content, const std::string& path) {
  const json root = json::parse(content, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_format(path + ": not valid JSON");
  return load_hf_tokenizer_json(root, path);
}

}  // namespace kuiper
