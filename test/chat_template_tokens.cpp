// chat_template_tokens: prints what kuiper's chat templates make of conversations, for
// test/chat_template_reference.py to compare with the models' own Jinja templates and the
// reference tokenizers. Reads one JSON conversation per line on stdin,
//   {"system": "...", "exchanges": [["user", "assistant"], ...], "user": "open turn"}
// and writes a first line "template <name>" naming the template chosen (with token ids, followed
// by "stop" and the ids that end a reply), then one line per
// conversation: its token ids separated by spaces, or with --render (no tokenizer needed) the
// text the layout renders, as a JSON string.
//   --jinja FILE   identify the layout from a Jinja chat_template file, as a model's would be
//   --model DIR    read the hints (tokenizer_config.json, generation_config.json) of a model directory
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kuiper/generation/chat_template_choice.h"

namespace {

int fail(const std::string& message) {
  std::cerr << "chat_template_tokens: error: " << message << "\n";
  return 1;
}

struct Conversation {
  std::string system, user;
  std::vector<kuiper::ChatExchange> exchanges;
};

std::optional<Conversation> parse(const std::string& line) {
  const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return std::nullopt;
  Conversation conversation{json.value("system", ""), json.value("user", ""), {}};
  for (const auto& pair : json.value("exchanges", nlohmann::json::array())) {
    conversation.exchanges.push_back({pair.at(0).get<std::string>(), pair.at(1).get<std::string>()});
  }
  return conversation;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kuiper;
  CLI::App app{"Print the chat template's token ids or text of JSON conversations.", "chat_template_tokens"};
  std::string tokenizer_path, template_name = "auto", jinja_path, model_dir;
  bool render = false;
  app.add_option("-t,--tokenizer", tokenizer_path, "tokenizer file (not needed with --render)");
  app.add_option("--template", template_name, "auto, llama2, llama3, chatml or mistral");
  app.add_option("--jinja", jinja_path, "a Jinja chat_template file to identify");
  app.add_option("--model", model_dir, "a model directory whose chat template hints to use");
  app.add_flag("--render", render, "print the rendered text instead of token ids");
  CLI11_PARSE(app, argc, argv);

  auto kind = parse_chat_template_kind(template_name);
  if (!kind.ok()) return fail(kind.status().message());
  ChatTemplateHints hints;
  if (!model_dir.empty()) {
    auto read = read_chat_template_hints(model_dir);
    if (!read.ok()) return fail(read.status().message());
    hints = std::move(*read);
  }
  if (!jinja_path.empty()) {
    std::ifstream in(jinja_path, std::ios::binary);
    if (!in) return fail(jinja_path + ": cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    hints.jinja = text.str();
    hints.jinja_origin = jinja_path;
  }

  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<ChatFormat> format;
  if (render) {
    ChatFormatOptions options;
    if (!hints.jinja.empty()) {
      auto identified = identify_chat_template(hints.jinja);
      if (!identified.ok()) return fail(identified.status().message());
      if (*kind == ChatTemplateKind::kAuto) *kind = identified->kind;
      options = identified->options;
    }
    auto made = make_chat_format(*kind, options);
    if (!made.ok()) return fail(made.status().message());
    format = std::move(*made);
  } else {
    auto loaded = load_tokenizer(tokenizer_path);
    if (!loaded.ok()) return fail(loaded.status().message());
    tokenizer = std::move(*loaded);
    auto chosen = choose_chat_template(*kind, hints, *tokenizer);
    if (!chosen.ok()) return fail(chosen.status().message());
    chat_template = std::move(*chosen);
  }

  if (format) {
    std::cout << "template " << format->name() << "\n";
  } else {
    std::cout << "template " << chat_template->name() << " stop";
    for (const int32_t id : chat_template->stop_tokens()) std::cout << " " << id;
    std::cout << "\n";
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    const auto conversation = parse(line);
    if (!conversation) return fail("not a JSON conversation: " + line);
    if (format) {
      std::cout << nlohmann::json(render_layout(dialog_layout(*format, conversation->system, conversation->exchanges,
                                                              conversation->user)))
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
      continue;
    }
    auto ids = chat_template->encode_dialog(conversation->system, conversation->exchanges, conversation->user);
    if (!ids.ok()) return fail(ids.status().message());
    for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? " " : "") << (*ids)[i];
    std::cout << "\n";
  }
  return 0;
}
