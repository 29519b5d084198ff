// The context policy of Conversation with a tiny context: the oldest turns are dropped (the
// system prompt stays), the conversation keeps answering, a turn that cannot fit is refused
// without changing anything, and the cache never holds more than the context. Also run under
// AddressSanitizer in CI (KUIPER_ASAN), which catches a write past a buffer the model owns.
#include <algorithm>
#include <string>
#include <vector>

#include "kuiper/generation/chat_template_choice.h"
#include "kuiper/generation/conversation.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

class ChatContext : public ::testing::Test {
 protected:
  void SetUp() override {
    KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path("models/stories260K/stories260K.bin")));
    KUIPER_ASSERT_OK_AND_ASSIGN(tokenizer_, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
    ModelOptions options;
    options.context = kContext;
    KUIPER_ASSERT_OK_AND_ASSIGN(engine_, Engine::create(ckpt.config, ckpt.weights, options, *tokenizer_, {.max_seqs = 1}));
    KUIPER_ASSERT_OK_AND_ASSIGN(template_, make_chat_template(ChatTemplateKind::kLlama2, *tokenizer_));
    session_ = std::make_unique<Session>(*engine_, sampling_);
  }

  // After every turn: the cache is the history without the last reply's closing token.
  void expect_cache_matches(const Conversation& conversation) {
    EXPECT_LE(session_->position(), kContext);
    KUIPER_ASSERT_OK_AND_ASSIGN(auto history, conversation.history_tokens());
    ASSERT_EQ(history.size(), session_->tokens().size() + template_->close_reply().size());
    EXPECT_TRUE(starts_with(history, session_->tokens()));
  }

  static constexpr int kContext = 96;  // tok512 spells "<<SYS>>" in ~40 tokens: a system prompt and two turns
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ChatTemplate> template_;
  SamplingParams sampling_{.temperature = 0.f};
  std::unique_ptr<Session> session_;
};

const auto kIgnore = [](std::string_view) { return true; };

TEST_F(ChatContext, DropsOldestTurnsAndKeepsTheSystemPrompt) {
  const std::string system = "Be brief.";
  Conversation conversation(*session_, *template_, system, /*max_reply=*/12);
  const std::vector<std::string> users = {"Tell me about the dog", "What did the dog do", "And the cat",
                                          "Where did they go", "The end", "One more time"};
  int dropped = 0;
  for (size_t k = 0; k < users.size(); ++k) {
    KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats stats, conversation.reply(users[k], kIgnore));
    dropped += stats.dropped_turns;
    EXPECT_EQ(stats.context_tokens, session_->position());
    expect_cache_matches(conversation);
    // The turns kept are the latest ones, and the first of them carries the system prompt.
    const size_t first_kept = k + 1 - conversation.turn_count();
    KUIPER_ASSERT_OK_AND_ASSIGN(auto opening, template_->open_turn(system, users[first_kept], true));
    EXPECT_TRUE(starts_with(session_->tokens(), opening)) << "turn " << k;
  }
  EXPECT_GT(dropped, 0) << "the turns were meant to overflow a " << kContext << "-token context";
  EXPECT_LT(conversation.turn_count(), static_cast<int>(users.size()));
}

TEST_F(ChatContext, RefusesATurnThatCannotFitAndCarriesOn) {
  Conversation conversation(*session_, *template_, "", /*max_reply=*/8);
  KUIPER_ASSERT_OK(conversation.reply("Hello", kIgnore).status());
  const std::vector<int32_t> before = session_->tokens();

  std::string huge;
  for (int i = 0; i < 40; ++i) huge += "The little dog ran to the park. ";
  auto refused = conversation.reply(huge, kIgnore);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(conversation.turn_count(), 1);
  EXPECT_EQ(session_->tokens(), before);

  KUIPER_ASSERT_OK(conversation.reply("Goodbye", kIgnore).status());
  EXPECT_EQ(conversation.turn_count(), 2);
  expect_cache_matches(conversation);
}

TEST_F(ChatContext, LongRepliesStopAtTheEndOfTheContext) {
  // max_reply far beyond the context: the reserve is a quarter of the context, and each reply
  // is cut where the context ends rather than written past it.
  Conversation conversation(*session_, *template_, "", /*max_reply=*/1000);
  EXPECT_EQ(conversation.reply_reserve(), kContext / 4);
  for (const char* user : {"Once upon a time", "Tell me more", "And then"}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(TurnStats stats, conversation.reply(user, kIgnore));
    EXPECT_LE(stats.context_tokens, kContext);
    expect_cache_matches(conversation);
  }
}

TEST_F(ChatContext, ContextTooSmallForAnyTurnIsRefused) {
  // Even an empty message needs BOS "[INST] [/INST]" and a reply reserve.
  ModelOptions options;
  options.context = 4;
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint ckpt, load_checkpoint(test::source_path("models/stories260K/stories260K.bin")));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tiny, Engine::create(ckpt.config, ckpt.weights, options, *tokenizer_, {.max_seqs = 1}));
  Session session(*tiny, sampling_);
  Conversation conversation(session, *template_, "", 8);
  auto refused = conversation.reply("Hi", kIgnore);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(session.position(), 0);
}

}  // namespace
}  // namespace kuiper
