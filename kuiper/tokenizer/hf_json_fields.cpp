#include "kuiper/tokenizer/hf_json_fields.h"

#include "kuiper/tokenizer/utf8.h"

namespace kuiper::hf {

StatusOr<int32_t> token_id(const json& value, const std::string& where) {
  if (value.is_number_unsigned() || value.is_number_integer()) {
    const bool negative = value.is_number_integer() && value.get<int64_t>() < 0;
    if (!negative && value.get<uint64_t>() < static_cast<uint64_t>(kMaxTokenId)) {
      return static_cast<int32_t>(value.get<uint64_t>());
    }
  }
  return invalid_format(where + ": id " + value.dump() + " is not an integer in [0, " +
                        std::to_string(kMaxTokenId) + ")");
}

StatusOr<std::string> string_field(const json& object, const char* key, const std::string& where,
                                   const std::string& fallback) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_string()) return invalid_format(where + ": \"" + key + "\" is not a string");
  return object[key].get<std::string>();
}

StatusOr<bool> bool_field(const json& object, const char* key, const std::string& where, bool fallback) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_boolean()) return invalid_format(where + ": \"" + key + "\" is not true/false");
  return object[key].get<bool>();
}

StatusOr<int64_t> count_field(const json& object, const char* key, const std::string& where, int64_t fallback) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  const json& value = object[key];
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
    return invalid_format(where + ": \"" + key + "\" is not a non-negative integer");
  }
  return static_cast<int64_t>(std::min<uint64_t>(value.get<uint64_t>(), INT64_MAX));
}

std::string type_of(const json& component) {
  if (!component.is_object() || !component.contains("type") || !component["type"].is_string()) return "";
  return component["type"].get<std::string>();
}

StatusOr<std::shared_ptr<const RegexSplitter>> compile_regex(const std::string& pattern, const std::string& where) {
  auto compiled = RegexSplitter::compile(pattern);
  if (!compiled.ok()) return invalid_format(where + ": " + compiled.status().message());
  return compiled;
}

StatusOr<std::string> char_field(const json& object, const char* key, const std::string& where,
                                 const std::string& fallback) {
  KUIPER_ASSIGN_OR_RETURN(std::string value, string_field(object, key, where, fallback));
  if (value.empty() || utf8::valid_char_length(value) != value.size()) {
    return invalid_format(where + ": \"" + key + "\" is not a single character");
  }
  return value;
}

namespace {

// Real files nest Sequences one or two deep; a hostile one must not exhaust the stack.
constexpr int kMaxSequenceDepth = 16;

Status collect_steps(const json& component, const char* list_key, const std::string& where, int depth,
                     std::vector<json>& steps) {
  if (component.is_null()) return ok_status();
  if (type_of(component) != "Sequence") {
    steps.push_back(component);
    return ok_status();
  }
  if (depth >= kMaxSequenceDepth) {
    return invalid_format(where + " Sequences nest deeper than " + std::to_string(kMaxSequenceDepth));
  }
  if (!component.contains(list_key) || !component[list_key].is_array()) {
    return invalid_format(where + " Sequence has no \"" + list_key + "\" list");
  }
  for (const json& inner : component[list_key]) {
    KUIPER_RETURN_IF_ERROR(collect_steps(inner, list_key, where, depth + 1, steps));
  }
  return ok_status();
}

}  // namespace

StatusOr<std::vector<json>> component_steps(const json& component, const char* list_key, const std::string& where) {
  std::vector<json> steps;
  KUIPER_RETURN_IF_ERROR(collect_steps(component, list_key, where, 0, steps));
  return steps;
}

}  // namespace kuiper::hf
