// llama.cpp's pre-tokenizer names (tokenizer.ggml.pre) as the tokenizer.json components of the
// models they stand for, both ways: a GGUF reader builds the components from the name, a GGUF
// writer finds the name of a tokenizer.json's components. One table, so the two agree.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kuiper {

// Sets the normalizer, pre_tokenizer and model.ignore_merges of tokenizer.json document `doc`
// for pre-tokenizer `name`; false when the name is not one kuiper knows.
bool apply_gguf_pre_tokenizer(const std::string& name, nlohmann::json& doc);

// The name whose components `doc` (a byte-level BPE tokenizer.json) uses; nullopt for none.
std::optional<std::string> gguf_pre_tokenizer_name(const nlohmann::json& doc);

// "llama-bpe, qwen2, smollm, gpt-2", for messages.
std::string known_gguf_pre_tokenizers();

}  // namespace kuiper
