// A GGUF file's own tokenizer (tokenizer.ggml.* metadata), run by the tokenizer classes kuiper
// already has: model "llama" becomes a SentencePiece BPE model (tokens, scores, token types)
// for libsentencepiece; model "gpt2" becomes a tokenizer.json document (byte-level BPE from
// tokens and merges, with the pre-tokenizer that tokenizer.ggml.pre names) for the HF reader.
#include <nlohmann/json.hpp>

#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/tokenizer/gguf_pre_tokenizers.h"
#include "kuiper/tokenizer/hf_tokenizer_json.h"
#include "kuiper/tokenizer/sentencepiece_proto.h"
#include "kuiper/tokenizer/tokenizer_formats.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

struct SpecialIds {
  std::optional<int64_t> bos, eos, unk, pad;
  bool add_bos = false;
};

StatusOr<std::optional<int64_t>> optional_id(const GgufFile& f, const std::string& key, size_t vocab) {
  if (!f.find(key)) return std::optional<int64_t>();
  KUIPER_ASSIGN_OR_RETURN(uint64_t id, f.get_uint(key));
  if (id >= vocab) {
    return invalid_format(f.path() + ": metadata key '" + key + "' is " + std::to_string(id) + ", beyond the " +
                          std::to_string(vocab) + " tokens");
  }
  return std::optional<int64_t>(static_cast<int64_t>(id));
}

StatusOr<SpecialIds> read_special_ids(const GgufFile& f, size_t vocab, bool add_bos_default) {
  SpecialIds s;
  KUIPER_ASSIGN_OR_RETURN(s.bos, optional_id(f, "tokenizer.ggml.bos_token_id", vocab));
  KUIPER_ASSIGN_OR_RETURN(s.eos, optional_id(f, "tokenizer.ggml.eos_token_id", vocab));
  KUIPER_ASSIGN_OR_RETURN(s.unk, optional_id(f, "tokenizer.ggml.unknown_token_id", vocab));
  KUIPER_ASSIGN_OR_RETURN(s.pad, optional_id(f, "tokenizer.ggml.padding_token_id", vocab));
  s.add_bos = add_bos_default;
  if (f.find("tokenizer.ggml.add_bos_token")) {
    KUIPER_ASSIGN_OR_RETURN(s.add_bos, f.get_bool("tokenizer.ggml.add_bos_token"));
  }
  return s;
}

// token_type, one per token; absent means every token is normal.
StatusOr<std::vector<int64_t>> token_types(const GgufFile& f, size_t vocab) {
  if (!f.find("tokenizer.ggml.token_type")) return std::vector<int64_t>(vocab, static_cast<int64_t>(PieceType::kNormal));
  KUIPER_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_ints("tokenizer.ggml.token_type"));
  if (types.size() != vocab) {
    return invalid_format(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                          " entries for " + std::to_string(vocab) + " tokens");
  }
  for (size_t i = 0; i < vocab; ++i) {
    if (types[i] < static_cast<int64_t>(PieceType::kNormal) || types[i] > static_cast<int64_t>(PieceType::kByte)) {
      return invalid_format(f.path() + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                            std::to_string(types[i]) + ", not a token type");
    }
  }
  return types;
}

StatusOr<std::unique_ptr<Tokenizer>> sentencepiece_from_gguf(const GgufFile& f, const std::vector<std::string_view>& tokens) {
  KUIPER_ASSIGN_OR_RETURN(std::vector<float> scores, f.get_floats("tokenizer.ggml.scores"));
  if (scores.size() != tokens.size()) {
    return invalid_format(f.path() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                          std::to_string(tokens.size()) + " tokens");
  }
  KUIPER_ASSIGN_OR_RETURN(std::vector<int64_t> types, token_types(f, tokens.size()));
  KUIPER_ASSIGN_OR_RETURN(SpecialIds ids, read_special_ids(f, tokens.size(), true));
  SentencePieceBpeSpec spec;
  bool has_bytes = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto type = static_cast<PieceType>(types[i]);
    spec.pieces.push_back({tokens[i], scores[i], type});
    has_bytes |= type == PieceType::kByte;
  }
  spec.byte_fallback = has_bytes;
  spec.unk_id = static_cast<int32_t>(ids.unk.value_or(0));
  spec.bos_id = static_cast<int32_t>(ids.bos.value_or(1));
  spec.eos_id = static_cast<int32_t>(ids.eos.value_or(2));
  spec.pad_id = static_cast<int32_t>(ids.pad.value_or(-1));
  if (f.find("tokenizer.ggml.add_space_prefix")) {
    KUIPER_ASSIGN_OR_RETURN(spec.add_dummy_prefix, f.get_bool("tokenizer.ggml.add_space_prefix"));
  }
  if (f.find("tokenizer.ggml.remove_extra_whitespaces")) {
    KUIPER_ASSIGN_OR_RETURN(spec.remove_extra_whitespaces, f.get_bool("tokenizer.ggml.remove_extra_whitespaces"));
  }
  return load_sentencepiece_tokenizer(serialize_sentencepiece_bpe(spec), f.path() + " (tokenizer.ggml metadata)");
}

StatusOr<std::unique_ptr<Tokenizer>> byte_level_bpe_from_gguf(const GgufFile& f, const std::vector<std::string_view>& tokens) {
  KUIPER_ASSIGN_OR_RETURN(std::vector<std::string_view> merges, f.get_strings("tokenizer.ggml.merges"));
  KUIPER_ASSIGN_OR_RETURN(std::vector<int64_t> types, token_types(f, tokens.size()));
  KUIPER_ASSIGN_OR_RETURN(SpecialIds ids, read_special_ids(f, tokens.size(), false));
  std::string pre = "gpt-2";
  if (f.find("tokenizer.ggml.pre")) {
    KUIPER_ASSIGN_OR_RETURN(pre, f.get_string("tokenizer.ggml.pre"));
  }

  // Every token is in the vocab, so an added token gets its own id as tokenizers assigns them;
  // control tokens are special, user-defined ones (Qwen3's <think>) are matched but not special.
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string token(tokens[i]);
    if (vocab.contains(token)) {
      return invalid_format(f.path() + ": tokenizer.ggml.tokens holds '" + token + "' twice");
    }
    vocab[token] = i;
    const auto type = static_cast<PieceType>(types[i]);
    if (type == PieceType::kControl || type == PieceType::kUserDefined) {
      added.push_back({{"id", i}, {"content", token}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", type == PieceType::kControl}});
    }
  }
  json doc = {{"version", "1.0"}, {"added_tokens", added}, {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}};
  doc["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", merges}};
  // An unknown name is refused rather than guessed: the split decides the ids.
  if (!apply_gguf_pre_tokenizer(pre, doc)) {
    return unsupported(f.path() + ": tokenizer.ggml.pre '" + pre + "' names a pre-tokenizer kuiper does not know (it knows " +
                       known_gguf_pre_tokenizers() + ")");
  }
  if (ids.add_bos && ids.bos) {
    const std::string bos(tokens[*ids.bos]);
    const json bos_token = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    const json text = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    doc["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single", {bos_token, text}},
                             {"pair", {bos_token, text, bos_token, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                             {"special_tokens", {{bos, {{"id", bos}, {"ids", {*ids.bos}}, {"tokens", {bos}}}}}}};
  }
  return load_hf_tokenizer_json(doc, f.path() + " (tokenizer.ggml metadata)");
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(std::shared_ptr<MappedFile> mapped) {
  KUIPER_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(std::move(mapped)));
  KUIPER_ASSIGN_OR_RETURN(std::string_view model, file.get_string("tokenizer.ggml.model"));
  KUIPER_ASSIGN_OR_RETURN(std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  if (model == "llama") return sentencepiece_from_gguf(file, tokens);
  if (model == "gpt2") return byte_level_bpe_from_gguf(file, tokens);
  return unsupported(file.path() + ": tokenizer.ggml.model '" + std::string(model) +
                     "' is not one kuiper reads (llama, gpt2)");
}

}  // namespace kuiper
