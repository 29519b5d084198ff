// Arbitrary user (and system) text through every chat layout, with the LLaMA 3 tokenizer
// (KUIPER_FUZZ_TOKENIZER): the first input byte splits the rest into system and user text.
#include <algorithm>
#include <string_view>

#include "fuzz_tokenizer.h"
#include "kuiper/generation/chat_template_choice.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = std::min<size_t>(data[0], rest.size());
  const std::string_view system = rest.substr(0, split), user = rest.substr(split);
  using kuiper::ChatTemplateKind;
  for (const ChatTemplateKind kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kLlama3, ChatTemplateKind::kChatml,
                                      ChatTemplateKind::kMistral}) {
    auto chat = kuiper::make_chat_template(kind, kuiper::fuzz::tokenizer());
    if (!chat.ok()) continue;
    for (const bool first_turn : {true, false}) (void)(*chat)->open_turn(system, user, first_turn);
  }
  return 0;
}
