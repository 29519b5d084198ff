// The token ids a request asks the model to continue: a completion's prompt as the tokenizer
// encodes it (with BOS, as llama_infer does) or as given in ids; a chat's messages laid out by
// the model's chat template (an optional system message first, then user and assistant turns
// in turn, ending with the user's).
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "api_error.h"
#include "kuiper/generation/chat_template.h"
#include "openai_request.h"

namespace kuiper::server {

std::variant<std::vector<int32_t>, ApiError> prompt_tokens(const GenerationRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const ChatTemplate& chat_template);

}  // namespace kuiper::server
