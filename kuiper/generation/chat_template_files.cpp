// read_chat_template_hints: what a Hugging Face model directory, or a GGUF file's metadata, says
// about its chat layout.
// tokenizer_config.json's "chat_template" is a string, or (models with tool templates) a list of
// {"name", "template"} of which "default" is the chat one; newer exports keep it in
// chat_template.jinja instead. generation_config.json's "eos_token_id" is an id or a list.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kuiper/base/regular_file.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/generation/chat_template_choice.h"

namespace kuiper {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The file's text, or nullopt when it does not exist.
StatusOr<std::optional<std::string>> read_if_present(const fs::path& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return std::optional<std::string>();
  KUIPER_ASSIGN_OR_RETURN(std::string text, read_regular_file(path.string()));
  return std::optional<std::string>(std::move(text));
}

StatusOr<json> parse_object(const fs::path& path, const std::string& text) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return invalid_format(path.string() + ": not a JSON object");
  return root;
}

StatusOr<std::string> chat_template_field(const fs::path& path, const json& field) {
  if (field.is_null()) return std::string();
  if (field.is_string()) return field.get<std::string>();
  if (field.is_array()) {
    for (const json& entry : field) {
      if (entry.is_object() && entry.value("name", json()) == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return invalid_format(path.string() + ": chat_template is a list without a \"default\" template");
  }
  return invalid_format(path.string() + ": chat_template is neither a string nor a list of named templates");
}

StatusOr<std::vector<int32_t>> eos_field(const fs::path& path, const json& field) {
  std::vector<int32_t> ids;
  const json list = field.is_array() ? field : json::array({field});
  for (const json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return invalid_format(path.string() + ": eos_token_id holds " + id.dump() + ", not a token id");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// A GGUF file keeps the template and end tokens in its metadata.
StatusOr<ChatTemplateHints> read_gguf_hints(const std::string& path) {
  KUIPER_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::open(path));
  KUIPER_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(std::move(mapped)));
  ChatTemplateHints hints;
  if (file.find("tokenizer.chat_template")) {
    KUIPER_ASSIGN_OR_RETURN(std::string_view jinja, file.get_string("tokenizer.chat_template"));
    hints.jinja = std::string(jinja);
    hints.jinja_origin = path + " (tokenizer.chat_template)";
  }
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    if (!file.find(key)) continue;
    KUIPER_ASSIGN_OR_RETURN(uint64_t id, file.get_uint(key));
    if (id > INT32_MAX) return invalid_format(path + ": metadata key '" + key + "' is not a token id");
    hints.eos_ids.push_back(static_cast<int32_t>(id));
  }
  return hints;
}

}  // namespace

StatusOr<ChatTemplateHints> read_chat_template_hints(const std::string& model_path) {
  if (is_gguf_file(model_path)) return read_gguf_hints(model_path);
  std::error_code error;
  const fs::path dir = fs::is_directory(model_path, error) ? fs::path(model_path) : fs::path(model_path).parent_path();
  ChatTemplateHints hints;

  const fs::path tokenizer_config = dir / "tokenizer_config.json";
  KUIPER_ASSIGN_OR_RETURN(auto config_text, read_if_present(tokenizer_config));
  if (config_text) {
    KUIPER_ASSIGN_OR_RETURN(json config, parse_object(tokenizer_config, *config_text));
    KUIPER_ASSIGN_OR_RETURN(hints.jinja, chat_template_field(tokenizer_config, config.value("chat_template", json())));
    hints.jinja_origin = tokenizer_config.string();
  }
  if (hints.jinja.empty()) {
    const fs::path jinja_file = dir / "chat_template.jinja";
    KUIPER_ASSIGN_OR_RETURN(auto jinja, read_if_present(jinja_file));
    if (jinja) {
      hints.jinja = std::move(*jinja);
      hints.jinja_origin = jinja_file.string();
    }
  }

  const fs::path generation_config = dir / "generation_config.json";
  KUIPER_ASSIGN_OR_RETURN(auto generation_text, read_if_present(generation_config));
  if (generation_text) {
    KUIPER_ASSIGN_OR_RETURN(json generation, parse_object(generation_config, *generation_text));
    const json eos = generation.value("eos_token_id", json());
    if (!eos.is_null()) {
      KUIPER_ASSIGN_OR_RETURN(hints.eos_ids, eos_field(generation_config, eos));
    }
  }
  return hints;
}

}  // namespace kuiper
