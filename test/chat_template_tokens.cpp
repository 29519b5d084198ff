// chat_template_tokens: prints the token ids kuiper's chat templates give to conversations, for
// test/chat_template_reference.py to compare with the reference tokenizers. Reads one JSON
// conversation per line on stdin,
//   {"system": "...", "exchanges": [["user", "assistant"], ...], "user": "open turn"}
// and writes its ids, separated by spaces, one line per conversation, after a first line
// "template <name>" naming the template chosen.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kuiper/generation/chat_template_choice.h"

namespace {

int fail(const std::string& message) {
  std::cerr << "chat_template_tokens: error: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kuiper;
  CLI::App app{"Print the chat template's token ids of JSON conversations.", "chat_template_tokens"};
  std::string tokenizer_path;
  std::string template_name = "auto";
  app.add_option("-t,--tokenizer", tokenizer_path, "tokenizer file")->required();
  app.add_option("--template", template_name, "auto, llama2 or llama3");
  CLI11_PARSE(app, argc, argv);

  auto tokenizer = load_tokenizer(tokenizer_path);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  auto kind = parse_chat_template_kind(template_name);
  if (!kind.ok()) return fail(kind.status().message());
  auto chat_template = make_chat_template(*kind, **tokenizer);
  if (!chat_template.ok()) return fail(chat_template.status().message());

  std::cout << "template " << (*chat_template)->name() << "\n";
  std::string line;
  while (std::getline(std::cin, line)) {
    const auto conversation = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (conversation.is_discarded()) return fail("not JSON: " + line);
    std::vector<ChatExchange> exchanges;
    for (const auto& pair : conversation.value("exchanges", nlohmann::json::array())) {
      exchanges.push_back({pair.at(0).get<std::string>(), pair.at(1).get<std::string>()});
    }
    auto ids = (*chat_template)->encode_dialog(conversation.value("system", ""), exchanges,
                                               conversation.value("user", ""));
    if (!ids.ok()) return fail(ids.status().message());
    for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? " " : "") << (*ids)[i];
    std::cout << "\n";
  }
  return 0;
}
