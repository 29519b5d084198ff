// Reading the fields of an untrusted tokenizer.json: token ids are checked to be integers in
// range (a file may say 2147483647, 2e9, 1e300 or -1), strings to be strings, and a
// component's "type" is named in every refusal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/regex_splitter.h"

namespace kuiper::hf {

using json = nlohmann::json;

// Ids at or above this are refused: no LLaMA-family vocabulary comes near it, and the bound
// keeps hostile ids from turning into huge allocations or int32 overflow downstream.
inline constexpr int64_t kMaxTokenId = int64_t{1} << 24;

StatusOr<int32_t> token_id(const json& value, const std::string& where);
// `object[key]` as a string; `fallback` when absent or null.
StatusOr<std::string> string_field(const json& object, const char* key, const std::string& where,
                                   const std::string& fallback = "");
// `object[key]` as a bool; `fallback` when absent or null.
StatusOr<bool> bool_field(const json& object, const char* key, const std::string& where, bool fallback);
// `object[key]` as a non-negative integer; `fallback` when absent or null.
StatusOr<int64_t> count_field(const json& object, const char* key, const std::string& where, int64_t fallback);
// The "type" of a component, or "" when it has none.
std::string type_of(const json& component);
// The steps of a component in order: the component itself, or, for a "Sequence", the entries of
// its `list_key` list (nested Sequences flattened). None for null.
// A regex read from the file, compiled; a failure names `where`.
StatusOr<std::shared_ptr<const RegexSplitter>> compile_regex(const std::string& pattern, const std::string& where);
// A string field that must hold exactly one character (tokenizers reads it as a Rust char).
StatusOr<std::string> char_field(const json& object, const char* key, const std::string& where, const std::string& fallback);

StatusOr<std::vector<json>> component_steps(const json& component, const char* list_key, const std::string& where);

}  // namespace kuiper::hf
