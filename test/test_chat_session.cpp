// A Conversation on the bundled stories260K model: each turn prefills only its own tokens on
// top of the cache, the cache holds the LLaMA 2 chat layout of the conversation (built here
// from the tokenizer, not from the template code), and after three turns the cached model
// gives the logits a fresh model computes from the whole conversation at once.
#include <algorithm>
#include <string>
#include <vector>

#include "kuiper/generation/chat_template_choice.h"
#include "kuiper/generation/conversation.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::to_host;

const std::string kStoriesModel = "models/stories260K/stories260K.bin";
const std::string kStoriesTokenizer = "models/stories260K/tok512.model";

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// The bundled stories260K model, greedy, with a fresh session per test.
class StoriesChat : public ::testing::Test {
 protected:
  void SetUp() override {
    KUIPER_ASSERT_OK_AND_ASSIGN(ckpt_, load_checkpoint(test::source_path(kStoriesModel)));
    KUIPER_ASSERT_OK_AND_ASSIGN(tokenizer_, load_tokenizer(test::source_path(kStoriesTokenizer)));
    EngineOptions options{.max_seqs = 1};
    options.observe_logits = [this](RequestId, int, std::span<const float> logits) {
      last_logits_.assign(logits.begin(), logits.end());
    };
    KUIPER_ASSERT_OK_AND_ASSIGN(engine_, Engine::create(ckpt_.config, ckpt_.weights, {}, *tokenizer_, options));
    session_ = std::make_unique<Session>(*engine_, SamplingParams{.temperature = 0.f});
  }

  Checkpoint ckpt_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::vector<float> last_logits_;  // the logits the latest token was sampled from
  std::unique_ptr<Session> session_;
};

TEST_F(StoriesChat, TurnsPrefillOnlyTheirTokensAndMatchAFreshModel) {
  const Checkpoint& ckpt = ckpt_;
  Tokenizer* tokenizer = tokenizer_.get();
  Session& session = *session_;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chat_template, make_chat_template(ChatTemplateKind::kAuto, *tokenizer));
  ASSERT_EQ(chat_template->name(), "llama2");  // tok512 has no LLaMA 3 header tokens
  const std::string system = "You tell short stories.";
  Conversation conversation(session, *chat_template, system, /*max_reply=*/24);

  const std::string users[] = {"Tell me a story about a cat.", "What did the cat find?", "How did it end?"};
  const auto ignore_pieces = [](std::string_view) { return true; };
  const int32_t eos = tokenizer->eos_ids().front();
  std::vector<int32_t> expected;  // the whole conversation so far
  for (int k = 0; k < 3; ++k) {
    const std::string instruction =
        k == 0 ? "[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n" + users[k] + " [/INST]" : "[INST] " + users[k] + " [/INST]";
    KUIPER_ASSERT_OK_AND_ASSIGN(auto opening, tokenizer->encode(instruction, {.add_bos = true}));
    if (k > 0) expected.push_back(eos);  // the previous reply's closing token
    expected.insert(expected.end(), opening.begin(), opening.end());
    const std::vector<int32_t> before = session.tokens();

    std::string text;
    KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats stats, conversation.reply(users[k], [&](std::string_view piece) {
      text += piece;
      return true;
    }));
    EXPECT_EQ(stats.dropped_turns, 0);
    EXPECT_EQ(stats.prefilled_tokens, static_cast<int>(opening.size()) + (k > 0 ? 1 : 0)) << "turn " << k;
    EXPECT_TRUE(starts_with(session.tokens(), before)) << "turn " << k << " rewrote earlier cache entries";
    ASSERT_TRUE(starts_with(session.tokens(), expected)) << "turn " << k;
    const std::vector<int32_t> reply(session.tokens().begin() + expected.size(), session.tokens().end());
    EXPECT_FALSE(reply.empty()) << "turn " << k;
    EXPECT_EQ(strip_message(tokenizer->decode(reply)), strip_message(text));  // what was shown is what is kept
    expected.insert(expected.end(), reply.begin(), reply.end());
    EXPECT_EQ(stats.context_tokens, static_cast<int>(expected.size()));
  }
  expected.push_back(eos);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto history, conversation.history_tokens());
  EXPECT_EQ(history, expected);

  // The cache after three turns, with the last reply closed, against a fresh model fed the
  // whole conversation in one prefill.
  const int32_t close[1] = {eos};
  KUIPER_ASSERT_OK_AND_ASSIGN(GenerationStats closing, session.generate(close, {.max_new_tokens = 0}, ignore_pieces));
  EXPECT_GT(closing.cached_tokens, 0);  // the engine kept the conversation's blocks
  const std::vector<float> cached = last_logits_;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto fresh_model, LlamaModel::create(ckpt.config, ckpt.weights, {}));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor fresh_logits, fresh_model->forward(expected, 0));
  const auto fresh = to_host(fresh_logits);
  ASSERT_EQ(cached.size(), fresh.size());
  EXPECT_LT(test::relative_error(cached.data(), fresh.data(), fresh.size()), 1e-5);
}

TEST_F(StoriesChat, ResetStartsAnEmptyConversation) {
  Tokenizer* tokenizer = tokenizer_.get();
  Session& session = *session_;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chat_template, make_chat_template(ChatTemplateKind::kLlama2, *tokenizer));
  Conversation conversation(session, *chat_template, "Be kind.", 8);
  const auto ignore = [](std::string_view) { return true; };
  KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats first, conversation.reply("Hello there", ignore));
  KUIPER_ASSERT_OK(conversation.reply("Again", ignore).status());
  conversation.reset();
  EXPECT_EQ(conversation.turn_count(), 0);
  EXPECT_EQ(session.position(), 0);
  // After a reset the same first turn is prefilled in full again and replies the same (greedy).
  KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats again, conversation.reply("Hello there", ignore));
  EXPECT_EQ(again.prefilled_tokens, first.prefilled_tokens);
  EXPECT_EQ(again.context_tokens, first.context_tokens);
}

TEST_F(StoriesChat, StoppedReplyStaysInTheHistory) {
  Tokenizer* tokenizer = tokenizer_.get();
  Session& session = *session_;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chat_template, make_chat_template(ChatTemplateKind::kLlama2, *tokenizer));
  Conversation conversation(session, *chat_template, "", 64);
  int pieces = 0;
  // What Ctrl-C does in llama_chat: the piece callback says stop.
  KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats stopped, conversation.reply("Tell me a story", [&](std::string_view) {
    return ++pieces < 3;
  }));
  EXPECT_EQ(stopped.generation.stop_reason, StopReason::kCallback);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto history, conversation.history_tokens());
  // The cache holds the history up to its closing EOS, which enters with the next turn.
  ASSERT_EQ(history.size(), session.tokens().size() + 1);
  EXPECT_TRUE(starts_with(history, session.tokens()));
  KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats next, conversation.reply("More", [](std::string_view) { return true; }));
  EXPECT_EQ(next.dropped_turns, 0);
  EXPECT_TRUE(starts_with(session.tokens(), history));
}

TEST(ChatSession, Llama3TurnsCloseWithEotAndKeepTheSystemBlock) {
  // A tiny random model over the real LLaMA 3 vocabulary: the replies are noise, the layout is not.
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/tokenizers/llama3/tokenizer.model")));
  LlamaConfig c = test::model_shape(16, 32, 1, 2, 1, tokenizer->vocab_size(), 128);
  c.rope_theta = 500000.f;
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, make_random_checkpoint(c, 11));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto chat_template, make_chat_template(ChatTemplateKind::kAuto, *tokenizer));
  ASSERT_EQ(chat_template->name(), "llama3");
  KUIPER_ASSERT_OK_AND_ASSIGN(auto engine, Engine::create(ckpt.config, ckpt.weights, {}, *tokenizer, {.max_seqs = 1}));
  Session session(*engine, {.temperature = 0.f});
  Conversation conversation(session, *chat_template, "Be terse.", /*max_reply=*/6);
  const auto ignore = [](std::string_view) { return true; };
  const int32_t eot = *tokenizer->special_token("<|eot_id|>");

  KUIPER_ASSERT_OK_AND_ASSIGN(auto first_text, tokenizer->encode(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
      {.add_bos = false, .allow_special = true}));
  KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats first, conversation.reply("Hi", ignore));
  EXPECT_EQ(first.prefilled_tokens, static_cast<int>(first_text.size()));
  ASSERT_TRUE(starts_with(session.tokens(), first_text));
  const std::vector<int32_t> after_first = session.tokens();

  KUIPER_ASSERT_OK_AND_ASSIGN(auto second_text, tokenizer->encode(
      "<|start_header_id|>user<|end_header_id|>\n\nAnd?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
      {.add_bos = false, .allow_special = true}));
  KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats second, conversation.reply("And?", ignore));
  // The first reply's <|eot_id|> enters the cache with the second turn, then the second turn.
  EXPECT_EQ(second.prefilled_tokens, 1 + static_cast<int>(second_text.size()));
  std::vector<int32_t> expected = after_first;
  expected.push_back(eot);
  expected.insert(expected.end(), second_text.begin(), second_text.end());
  EXPECT_TRUE(starts_with(session.tokens(), expected));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto history, conversation.history_tokens());
  EXPECT_EQ(history.back(), eot);
}

}  // namespace
}  // namespace kuiper
