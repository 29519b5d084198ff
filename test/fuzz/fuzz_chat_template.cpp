// Arbitrary user (and system) text through every chat layout, with the LLaMA 3 tokenizer
// (KUIPER_FUZZ_TOKENIZER): the first input byte splits the rest into system and user text.
#include <cstdlib>
#include <memory>

#include "kuiper/generation/chat_template_choice.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace {

const kuiper::Tokenizer& tokenizer() {
  static const std::unique_ptr<kuiper::Tokenizer> loaded = [] {
    auto t = kuiper::load_tokenizer(KUIPER_FUZZ_TOKENIZER);
    if (!t.ok()) std::abort();  // the harness is misconfigured, not the input bad
    return std::move(t).value();
  }();
  return *loaded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = std::min<size_t>(data[0], rest.size());
  const std::string_view system = rest.substr(0, split), user = rest.substr(split);
  using kuiper::ChatTemplateKind;
  for (const ChatTemplateKind kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kLlama3, ChatTemplateKind::kChatml,
                                      ChatTemplateKind::kMistral}) {
    auto chat = kuiper::make_chat_template(kind, tokenizer());
    if (!chat.ok()) continue;
    for (const bool first_turn : {true, false}) (void)(*chat)->open_turn(system, user, first_turn);
  }
  return 0;
}
