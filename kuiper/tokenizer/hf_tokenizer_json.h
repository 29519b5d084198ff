// Loading an HF tokenizer.json that is already parsed: for load_tokenizer() and for readers
// that build a tokenizer.json-shaped document from other metadata (GGUF's tokenizer.ggml.*).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "kuiper/base/status.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper {

// `source` names the document in messages (a path, or e.g. "model.gguf tokenizer metadata").
StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(const nlohmann::json& document,
                                                            const std::string& source);

}  // namespace kuiper
