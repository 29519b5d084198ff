// The ChatML and Mistral templates in a live Conversation (the cache is reused turn after turn,
// turns are dropped when the context is full, the system prompt stays), and the choice of a
// template from a model's files: identification by markers on spellings the real templates in
// chat_template_reference.py do not cover, generation_config.json eos ids, damaged files.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kuiper/checkpoint/random_checkpoint.h"
#include "kuiper/engine/engine.h"
#include "kuiper/generation/chat_template_choice.h"
#include "kuiper/generation/conversation.h"
#include "kuiper/tokenizer/byte_level_alphabet.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A byte-level tokenizer.json with ChatML's special tokens: bytes are ids 0..255 (no merges),
// <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258; decoded by ByteLevel, as Qwen's files are.
std::string write_chatml_tokenizer() {
  json vocab = json::object();
  for (char32_t c = 0; c < 0x200; ++c) {  // the byte-level alphabet lies below U+0200
    std::string utf8;
    if (c < 0x80) {
      utf8 += static_cast<char>(c);
    } else {
      utf8 += static_cast<char>(0xC0 | (c >> 6));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    }
    const auto bytes = byte_level_to_bytes(utf8);
    if (bytes && bytes->size() == 1) vocab[utf8] = static_cast<uint8_t>((*bytes)[0]);
  }
  const json doc = {
      {"added_tokens", {{{"id", 256}, {"content", "<|endoftext|>"}, {"special", true}},
                        {{"id", 257}, {"content", "<|im_start|>"}, {"special", true}},
                        {{"id", 258}, {"content", "<|im_end|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  const std::string path = test::scratch_dir("chat_formats_chatml") + "/tokenizer.json";
  write_file(path, doc.dump());
  return path;
}

// A tiny random model over a tokenizer's vocabulary and a session on it: replies are noise,
// layouts and the cache are not. (The one place these tests build a session.)
struct RandomChatModel {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Session> session;
};

StatusOr<std::unique_ptr<RandomChatModel>> random_chat_model(const Tokenizer& tokenizer, int context) {
  const LlamaConfig c = test::model_shape(16, 32, 2, 2, 1, tokenizer.vocab_size(), context);
  KUIPER_ASSIGN_OR_RETURN(Checkpoint ckpt, make_random_checkpoint(c, 5));
  auto chat_model = std::make_unique<RandomChatModel>();
  KUIPER_ASSIGN_OR_RETURN(chat_model->engine, Engine::create(ckpt.config, ckpt.weights, {}, tokenizer, {.max_seqs = 1}));
  chat_model->session = std::make_unique<Session>(*chat_model->engine, SamplingParams{.temperature = 0.f});
  return chat_model;
}

// Three turns: each prefills only the previous reply's closing tokens and its own opening, the
// cache only grows, and it holds the history (the last reply's closing tokens enter with the
// next turn). test_chat_session.cpp checks that such a cache gives a fresh model's logits.
void expect_turns_reuse_the_cache(const Tokenizer& tokenizer, const ChatTemplate& chat) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chat_model, random_chat_model(tokenizer, 512));
  Session& session = *chat_model->session;
  const std::string system = "Be terse.";
  Conversation conversation(session, chat, system, /*max_reply=*/6);
  const std::vector<int32_t>& close = chat.close_reply();
  const std::string users[] = {"Hello!", "And then?", "Thanks"};
  for (int k = 0; k < 3; ++k) {
    const std::vector<int32_t> before = session.tokens();
    KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats stats, conversation.reply(users[k], [](std::string_view) { return true; }));
    KUIPER_ASSERT_OK_AND_ASSIGN(auto open, chat.open_turn(system, users[k], k == 0));
    EXPECT_EQ(stats.prefilled_tokens, static_cast<int>(open.size() + (k > 0 ? close.size() : 0)))
        << chat.name() << " turn " << k;
    EXPECT_TRUE(starts_with(session.tokens(), before)) << chat.name() << " turn " << k << " rewrote the cache";
  }
  KUIPER_ASSERT_OK_AND_ASSIGN(auto history, conversation.history_tokens());
  std::vector<int32_t> cached = session.tokens();
  cached.insert(cached.end(), close.begin(), close.end());
  EXPECT_EQ(history, cached) << chat.name();
}

TEST(ChatFormats, ChatmlAndMistralTurnsReuseTheCache) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chatml_tokenizer, load_tokenizer(write_chatml_tokenizer()));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chatml, make_chat_template(ChatTemplateKind::kAuto, *chatml_tokenizer));
  ASSERT_EQ(chatml->name(), "chatml");  // from the tokenizer's <|im_start|>/<|im_end|>
  const std::vector<int32_t>& stops = chatml->stop_tokens();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 258), stops.end()) << "<|im_end|> ends a reply";
  expect_turns_reuse_the_cache(*chatml_tokenizer, *chatml);

  KUIPER_ASSERT_OK_AND_ASSIGN(auto sentencepiece, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto mistral, make_chat_template(ChatTemplateKind::kMistral, *sentencepiece));
  expect_turns_reuse_the_cache(*sentencepiece, *mistral);
}

TEST(ChatFormats, ReasoningOfEarlierRepliesIsDroppedWhereTheTemplateDropsIt) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(write_chatml_tokenizer()));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto generated, tokenizer->encode("<think>\nsix times seven\n</think>\n\n42.", {.add_bos = false}));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto answer, tokenizer->encode("42.", {.add_bos = false}));
  for (const bool drops : {true, false}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(
        auto chat, ChatTemplate::create(make_chatml_chat_format({.default_system = "", .drops_reasoning = drops}),
                                        *tokenizer));
    KUIPER_ASSERT_OK_AND_ASSIGN(auto kept, chat->history_reply(generated));
    EXPECT_EQ(kept, drops ? answer : generated) << "drops reasoning: " << drops;
  }
}

TEST(ChatFormats, FullContextDropsTurnsAndKeepsTheChatmlSystemTurn) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(write_chatml_tokenizer()));
  ChatTemplateHints hints;
  hints.jinja = "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}";
  hints.jinja_origin = "test";
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chosen, choose_chat_template(ChatTemplateKind::kAuto, hints, *tokenizer));
  const ChatTemplate& chat = *chosen;
  constexpr int kContext = 160;  // bytes are tokens: the system turn and about two short turns
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chat_model, random_chat_model(*tokenizer, kContext));
  Session& session = *chat_model->session;
  const std::string system = "Answer in one word.";
  Conversation conversation(session, chat, system, /*max_reply=*/8);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto system_turn, tokenizer->encode("<|im_start|>system\nAnswer in one word.<|im_end|>\n",
                                                                  {.add_bos = false, .allow_special = true}));
  int dropped = 0;
  for (int k = 0; k < 6; ++k) {
    KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats stats, conversation.reply("Question number " + std::to_string(k) + "?",
                                                                    [](std::string_view) { return true; }));
    dropped += stats.dropped_turns;
    EXPECT_LE(session.position(), kContext);
    EXPECT_TRUE(starts_with(session.tokens(), system_turn)) << "turn " << k;
  }
  EXPECT_GT(dropped, 0);
  // A message that cannot fit even alone is refused, and the conversation stays as it was.
  const int turns = conversation.turn_count();
  auto refused = conversation.reply(std::string(kContext, 'x'), [](std::string_view) { return true; });
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(conversation.turn_count(), turns);
}

TEST(ChatFormats, IdentifiesTemplatesByTheirMarkers) {
  const struct {
    const char* source;
    ChatTemplateKind kind;
    const char* default_system;
  } cases[] = {
      // Generic ChatML (OpenHermes and the like): no default system prompt.
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
       "'<|im_end|>' + '\\n'}}{% endfor %}",
       ChatTemplateKind::kChatml, ""},
      // Qwen3 with thinking switched off closes an empty <think> block: nothing is opened.
      {"{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' }}{%- if add_generation_prompt %}"
       "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}"
       "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}",
       ChatTemplateKind::kChatml, ""},
      // Qwen2's default, with a literal newline rather than the \n escape.
      {"{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful "
       "assistant.<|im_end|>\n' }}{% endif %}",
       ChatTemplateKind::kChatml, "You are a helpful assistant."},
      // LLaMA 3 with double quotes and whitespace control.
      {"{{- bos_token }}{%- for m in messages %}{{- \"<|start_header_id|>\" + m.role + \"<|end_header_id|>\\n\\n\" "
       "+ m.content | trim + \"<|eot_id|>\" }}{%- endfor %}",
       ChatTemplateKind::kLlama3, ""},
      {"{{ bos_token + '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + content + ' [/INST]' }}",
       ChatTemplateKind::kLlama2, ""},
      {"{{ bos_token }}{% for m in messages %}{{ ' [INST] ' + m['content'] + ' [/INST]' }}{% endfor %}",
       ChatTemplateKind::kMistral, ""},
      // Default system prompts as a variable's literal, as a concatenated literal; one that only a
      // thinking switch writes is none.
      {"{% set system_message = 'Be \\'brief\\'.' %}{% if messages[0]['role'] == 'system' %}...{% endif %}"
       "{{ '<|im_start|>system\n' + system_message + '<|im_end|>\n' }}",
       ChatTemplateKind::kChatml, "Be 'brief'."},
      {"{%- if not ns.found -%}{{- '<|im_start|>system\n' + 'You are Dolphin.' + '<|im_end|>\n' -}}{%- endif -%}"
       "{{ '<|im_start|>' + message['role'] }}",
       ChatTemplateKind::kChatml, "You are Dolphin."},
      {"{%- elif enable_thinking %}{{- \"<|im_start|>system\n\" + \"Think.\" + \"<|im_end|>\" }}{%- endif %}"
       "{{- '<|im_start|>' + message['role'] + '\n' }}",
       ChatTemplateKind::kChatml, ""},
  };
  for (const auto& c : cases) {
    KUIPER_ASSERT_OK_AND_ASSIGN(auto identified, identify_chat_template(c.source));
    EXPECT_EQ(identified.kind, c.kind) << c.source;
    EXPECT_EQ(identified.options.default_system, c.default_system) << c.source;
    EXPECT_FALSE(identified.options.drops_reasoning) << c.source;
    EXPECT_FALSE(identified.description.empty()) << c.source;
  }
  const char* refusals[] = {
      "", "{{ messages }}", "<start_of_turn>user\n{{ m }}<end_of_turn>",
      // Family markers, other layouts: Yi's bare system text, Llama Guard's fixed prompt, Phi-4's
      // <|im_sep|>, a generation prompt that opens <think>, [INST] without BOS, Mistral v7.
      "{{ system_message }}{{ '<|im_start|>user\n' + content + '<|im_end|>\n<|im_start|>assistant\n' }}"
      "{% elif message['role'] == 'assistant' %}",
      "<|start_header_id|>user<|end_header_id|>\n\nTask: Check if there is unsafe content in '\" + role + \"'"
      "<|eot_id|><|start_header_id|>assistant<|end_header_id|>",
      "{{'<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>'}}",
      "{{'<|im_start|>' + message['role'] + '\n'}}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
      "{%- if enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- else %}{{- '<think>\n' }}{%- endif %}"
      "{%- endif %}",
      "{{ '[INST] <<SYS>>\n' + system + '\n<</SYS>>\n\n' + content + ' [/INST]' }}",
      "{{ bos_token }}{{ '[SYSTEM_PROMPT]' + system + '[/SYSTEM_PROMPT]' }}{{ '[INST]' + content + '[/INST]' }}",
  };
  // LLaMA 3.1: a system turn always, dated by date_string; one written under a condition is not.
  KUIPER_ASSERT_OK_AND_ASSIGN(
      auto llama31, identify_chat_template("{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}"
                                           "{%- endif %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
                                           "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- system_message }}"
                                           "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"
                                           "{{- \"<|eot_id|>\" }}"));
  EXPECT_EQ(llama31.kind, ChatTemplateKind::kLlama3);
  EXPECT_TRUE(llama31.options.always_system_turn);
  EXPECT_EQ(llama31.options.system_preamble, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
  KUIPER_ASSERT_OK_AND_ASSIGN(
      auto conditional, identify_chat_template("{%- if system_message != '' %}{{- \"<|start_header_id|>system"
                                               "<|end_header_id|>\\n\\n\" }}{%- endif %}{{- '<|start_header_id|>' + "
                                               "message['role'] + '<|end_header_id|>' + '<|eot_id|>' }}"));
  EXPECT_FALSE(conditional.options.always_system_turn);

  // An untrusted template (GGUF metadata) of many system-turn markers without an end is looked
  // through in bounded windows, not from each marker to its end.
  std::string hostile = "<|im_end|>";
  for (int i = 0; i < 20000; ++i) hostile += "<|im_start|>system\\n{x}";
  KUIPER_ASSERT_OK_AND_ASSIGN(auto looked_through, identify_chat_template(hostile));
  EXPECT_EQ(looked_through.options.default_system, "");
  for (const char* unknown : refusals) {
    auto refused = identify_chat_template(unknown);
    ASSERT_FALSE(refused.ok()) << unknown;
    EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(refused.status().message().find("--template"), std::string::npos) << refused.status().message();
    EXPECT_EQ(refused.status().message().find('\n'), std::string::npos) << "one line";
  }
}

TEST(ChatFormats, ModelFilesChooseTheTemplateAndItsStops) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto llama3, load_tokenizer(test::source_path("models/tokenizers/llama3/tokenizer.model")));
  const std::string dir = test::scratch_dir("chat_formats_hints");
  std::filesystem::remove(dir + "/tokenizer_config.json");

  // Only generation_config.json: its <|eot_id|> makes it LLaMA 3, and both ids stop replies.
  write_file(dir + "/generation_config.json", R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009]})");
  KUIPER_ASSERT_OK_AND_ASSIGN(auto hints, read_chat_template_hints(dir + "/model.safetensors"));
  EXPECT_TRUE(hints.jinja.empty());
  EXPECT_EQ(hints.eos_ids, (std::vector<int32_t>{128001, 128009}));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chosen, choose_chat_template(ChatTemplateKind::kAuto, hints, *llama3));
  EXPECT_EQ(chosen->name(), "llama3");
  EXPECT_NE(chosen->origin().find("generation_config"), std::string::npos) << chosen->origin();

  // A list of named templates: the "default" one counts; --template still wins over it.
  write_file(dir + "/tokenizer_config.json",
             R"({"chat_template": [{"name": "tool_use", "template": "{{ tools }}"},
                                   {"name": "default", "template": "<|im_start|>{{ message.role }}<|im_end|>"}]})");
  KUIPER_ASSERT_OK_AND_ASSIGN(hints, read_chat_template_hints(dir));
  EXPECT_EQ(hints.jinja, "<|im_start|>{{ message.role }}<|im_end|>");
  auto chatml = choose_chat_template(ChatTemplateKind::kAuto, hints, *llama3);
  ASSERT_FALSE(chatml.ok()) << "the LLaMA 3 vocabulary has no <|im_start|>";
  EXPECT_NE(chatml.status().message().find("<|im_start|>"), std::string::npos) << chatml.status().message();
  KUIPER_ASSERT_OK_AND_ASSIGN(chosen, choose_chat_template(ChatTemplateKind::kLlama3, hints, *llama3));
  EXPECT_EQ(chosen->name(), "llama3");

  // An unknown template: one line naming the file, suggesting --template.
  write_file(dir + "/tokenizer_config.json", R"({"chat_template": "<start_of_turn>{{ m }}<end_of_turn>"})");
  KUIPER_ASSERT_OK_AND_ASSIGN(hints, read_chat_template_hints(dir));
  auto unknown = choose_chat_template(ChatTemplateKind::kAuto, hints, *llama3);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tokenizer_config.json"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("--template"), std::string::npos);

  // Damaged files and out-of-vocabulary stop ids are errors naming the file or the id.
  write_file(dir + "/tokenizer_config.json", "{\"chat_template\": ");
  auto damaged = read_chat_template_hints(dir);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("tokenizer_config.json"), std::string::npos);
  write_file(dir + "/tokenizer_config.json", R"({"chat_template": 7})");
  EXPECT_FALSE(read_chat_template_hints(dir).ok());
  std::filesystem::remove(dir + "/tokenizer_config.json");
  write_file(dir + "/generation_config.json", R"({"eos_token_id": 999999})");
  KUIPER_ASSERT_OK_AND_ASSIGN(hints, read_chat_template_hints(dir));
  auto outside = choose_chat_template(ChatTemplateKind::kAuto, hints, *llama3);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("999999"), std::string::npos) << outside.status().message();
  write_file(dir + "/generation_config.json", R"({"eos_token_id": [2, -1]})");
  EXPECT_FALSE(read_chat_template_hints(dir).ok());
}

}  // namespace
}  // namespace kuiper
