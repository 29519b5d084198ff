// LLaMA 3 instruct, as Meta's reference ChatFormat lays it out:
//   <|begin_of_text|>
//   <|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>        (when there is one)
//   <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
//   <|start_header_id|>assistant<|end_header_id|>\n\n{assistant}<|eot_id|>  ... and for the
// open turn the assistant header alone. Messages are stripped and encoded on their own, as the
// reference does (the same ids as encoding the whole text with special tokens allowed, since
// tiktoken's pre-tokenizer never joins the header's "\n\n" with a stripped message).
#include <algorithm>

#include "kuiper/generation/llama_chat_templates.h"

namespace kuiper {
namespace {

struct Llama3Tokens {
  int32_t begin_of_text, start_header, end_header, eot;
};

class Llama3ChatTemplate final : public ChatTemplate {
 public:
  Llama3ChatTemplate(const Tokenizer& tokenizer, Llama3Tokens tokens) : tokenizer_(tokenizer), tokens_(tokens) {}

  std::string name() const override { return "llama3"; }

  StatusOr<std::vector<int32_t>> open_turn(std::string_view system, std::string_view user,
                                           bool first_turn) const override {
    std::vector<int32_t> ids;
    if (first_turn) {
      ids.push_back(tokens_.begin_of_text);
      if (!system.empty()) KUIPER_RETURN_IF_ERROR(append_message("system", system, ids));
    }
    KUIPER_RETURN_IF_ERROR(append_message("user", user, ids));
    KUIPER_RETURN_IF_ERROR(append_header("assistant", ids));
    return ids;
  }

  std::vector<int32_t> close_reply() const override { return {tokens_.eot}; }

  std::vector<int32_t> stop_tokens() const override {
    std::vector<int32_t> stops = tokenizer_.eos_ids();
    if (std::find(stops.begin(), stops.end(), tokens_.eot) == stops.end()) stops.push_back(tokens_.eot);
    return stops;
  }

  StatusOr<std::vector<int32_t>> encode_exchange(std::string_view system, const ChatExchange& exchange,
                                                 bool first_turn) const override {
    KUIPER_ASSIGN_OR_RETURN(auto ids, open_turn(system, exchange.user, first_turn));
    KUIPER_RETURN_IF_ERROR(append_text(strip_message(exchange.assistant), ids));
    ids.push_back(tokens_.eot);
    return ids;
  }

 private:
  Status append_text(std::string_view text, std::vector<int32_t>& ids) const {
    KUIPER_ASSIGN_OR_RETURN(auto encoded, tokenizer_.encode(text, {.add_bos = false, .allow_special = false}));
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    return ok_status();
  }

  Status append_header(std::string_view role, std::vector<int32_t>& ids) const {
    ids.push_back(tokens_.start_header);
    KUIPER_RETURN_IF_ERROR(append_text(role, ids));
    ids.push_back(tokens_.end_header);
    return append_text("\n\n", ids);
  }

  Status append_message(std::string_view role, std::string_view content, std::vector<int32_t>& ids) const {
    KUIPER_RETURN_IF_ERROR(append_header(role, ids));
    KUIPER_RETURN_IF_ERROR(append_text(strip_message(content), ids));
    ids.push_back(tokens_.eot);
    return ok_status();
  }

  const Tokenizer& tokenizer_;
  Llama3Tokens tokens_;
};

}  // namespace

StatusOr<std::unique_ptr<ChatTemplate>> make_llama3_chat_template(const Tokenizer& tokenizer) {
  Llama3Tokens tokens{};
  const std::pair<const char*, int32_t*> needed[] = {{"<|begin_of_text|>", &tokens.begin_of_text},
                                                     {"<|start_header_id|>", &tokens.start_header},
                                                     {"<|end_header_id|>", &tokens.end_header},
                                                     {"<|eot_id|>", &tokens.eot}};
  for (const auto& [text, id] : needed) {
    const auto found = tokenizer.special_token(text);
    if (!found) {
      return invalid_argument(std::string("the llama3 chat template needs the special token ") + text +
                              ", which this " + tokenizer.kind() + " tokenizer does not have");
    }
    *id = *found;
  }
  return std::unique_ptr<ChatTemplate>(std::make_unique<Llama3ChatTemplate>(tokenizer, tokens));
}

}  // namespace kuiper
