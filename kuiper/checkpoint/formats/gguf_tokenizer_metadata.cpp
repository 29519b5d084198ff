#include "kuiper/checkpoint/formats/gguf_tokenizer_metadata.h"

#include <map>

#include <nlohmann/json.hpp>

#include "kuiper/tokenizer/gguf_pre_tokenizers.h"
#include "kuiper/tokenizer/sentencepiece_proto.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

Status copy_gguf_tokenizer(GgufWriter& writer, std::shared_ptr<MappedFile> mapped) {
  KUIPER_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(std::move(mapped)));
  for (const auto& [key, value] : file.metadata()) {
    if (key.starts_with("tokenizer.")) KUIPER_RETURN_IF_ERROR(writer.add_value(key, value));
  }
  return ok_status();
}

Status add_sentencepiece(GgufWriter& writer, std::string_view bytes, const std::string& path, const LlamaConfig& config) {
  KUIPER_ASSIGN_OR_RETURN(SentencePieceBpeSpec spec, parse_sentencepiece_bpe(bytes, path));
  if (static_cast<int64_t>(spec.pieces.size()) != config.vocab_size) {
    return invalid_argument(path + " has " + std::to_string(spec.pieces.size()) + " pieces, the model " +
                            std::to_string(config.vocab_size) + " tokens");
  }
  std::vector<std::string_view> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const SentencePiece& p : spec.pieces) {
    tokens.push_back(p.piece);
    scores.push_back(p.score);
    types.push_back(static_cast<int32_t>(p.type));
  }
  writer.add_string("tokenizer.ggml.model", "llama");
  writer.add_string("tokenizer.ggml.pre", "default");
  writer.add_strings("tokenizer.ggml.tokens", tokens);
  writer.add_floats("tokenizer.ggml.scores", scores);
  writer.add_int32s("tokenizer.ggml.token_type", types);
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", spec.bos_id},
                                                 {"tokenizer.ggml.eos_token_id", spec.eos_id},
                                                 {"tokenizer.ggml.unknown_token_id", spec.unk_id},
                                                 {"tokenizer.ggml.padding_token_id", spec.pad_id}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) writer.add_uint32(key, static_cast<uint32_t>(id));
  }
  writer.add_bool("tokenizer.ggml.add_bos_token", true);
  writer.add_bool("tokenizer.ggml.add_eos_token", false);
  writer.add_bool("tokenizer.ggml.add_space_prefix", spec.add_dummy_prefix);
  writer.add_bool("tokenizer.ggml.remove_extra_whitespaces", spec.remove_extra_whitespaces);
  return ok_status();
}

// Token types as llama.cpp's converter gives them: added special tokens are control tokens,
// other added tokens user-defined, the rest normal.
Status add_byte_level_bpe(GgufWriter& writer, const std::string& text, const std::string& path, const LlamaConfig& config) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return invalid_format(path + ": not valid JSON");
  const json model = doc.value("model", json());
  if (!model.is_object() || model.value("type", "") != "BPE" || model.value("byte_fallback", false) ||
      !model.contains("vocab") || !model["vocab"].is_object()) {
    return unsupported(path + ": only byte-level BPE tokenizer.json files can be stored as GGUF metadata "
                              "(for a SentencePiece-style one, export with its tokenizer.model)");
  }
  const std::optional<std::string> pre = gguf_pre_tokenizer_name(doc);
  if (!pre) {
    return unsupported(path + ": its pre-tokenizer is none of llama.cpp's that kuiper knows (" +
                       known_gguf_pre_tokenizers() + ")");
  }
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> token, type
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return invalid_format(path + ": vocab id of '" + token + "' is not an integer");
    by_id[id.get<int64_t>()] = {token, static_cast<int32_t>(PieceType::kNormal)};
  }
  for (const json& added : doc.value("added_tokens", json::array())) {
    const auto type = added.value("special", false) ? PieceType::kControl : PieceType::kUserDefined;
    by_id[added.value("id", int64_t{-1})] = {added.value("content", ""), static_cast<int32_t>(type)};
  }
  if (by_id.empty() || by_id.begin()->first != 0 || by_id.rbegin()->first != static_cast<int64_t>(by_id.size()) - 1) {
    return unsupported(path + ": token ids are not 0..n-1 without gaps, as GGUF's token list needs");
  }
  if (static_cast<int64_t>(by_id.size()) > config.vocab_size) {
    return invalid_argument(path + " has " + std::to_string(by_id.size()) + " tokens, the model " +
                            std::to_string(config.vocab_size));
  }
  // Rows of the embedding past the tokenizer's tokens get placeholder tokens, as llama.cpp's
  // converter pads them (the token list must cover the vocabulary).
  for (int64_t id = static_cast<int64_t>(by_id.size()); id < config.vocab_size; ++id) {
    by_id[id] = {"[PAD" + std::to_string(id) + "]", static_cast<int32_t>(PieceType::kUnused)};
  }
  std::vector<std::string_view> tokens, merges;
  std::vector<int32_t> types;
  for (const auto& [id, entry] : by_id) {
    tokens.push_back(entry.first);
    types.push_back(entry.second);
  }
  std::vector<std::string> joined;  // merges given as pairs, joined as llama.cpp stores them
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string()) {
      joined.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      joined.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return invalid_format(path + ": a merge is neither \"a b\" nor [a, b]");
    }
  }
  for (const std::string& m : joined) merges.push_back(m);
  const json processor = doc.value("post_processor", json());
  const bool bos_in_template = processor.is_object() && processor.value("type", "") == "TemplateProcessing";
  writer.add_string("tokenizer.ggml.model", "gpt2");
  writer.add_string("tokenizer.ggml.pre", *pre);
  writer.add_strings("tokenizer.ggml.tokens", tokens);
  writer.add_int32s("tokenizer.ggml.token_type", types);
  writer.add_strings("tokenizer.ggml.merges", merges);
  writer.add_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(config.bos_id));
  if (!config.eos_ids.empty()) writer.add_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(config.eos_ids.front()));
  writer.add_bool("tokenizer.ggml.add_bos_token", bos_in_template);
  return ok_status();
}

}  // namespace

Status add_gguf_tokenizer(GgufWriter& writer, const std::string& tokenizer_path, const LlamaConfig& config) {
  KUIPER_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(tokenizer_path));
  if (GgufFile::has_magic(*file)) return copy_gguf_tokenizer(writer, file);
  const std::string_view content(reinterpret_cast<const char*>(file->data()), file->size());
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && content[first] == '{') {
    return add_byte_level_bpe(writer, std::string(content), tokenizer_path, config);
  }
  return add_sentencepiece(writer, content, tokenizer_path, config);
}

}  // namespace kuiper
