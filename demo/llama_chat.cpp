// llama_chat: a multi-turn chat with a LLaMA chat model, each reply streamed as it is generated.
//   llama_chat -m llama-2-7b-chat.bin --system "Answer briefly."   # interactive (a terminal)
//   printf 'Hi\nAnd then?\n' | llama_chat --temp 0 > replies.txt   # scripted: a turn per line
// Interactive: readline editing and history, /reset starts over, /stats shows statistics,
// /exit or Ctrl-D quits, Ctrl-C stops the reply being generated. Scripted (stdin not a
// terminal): each line is one user turn (the same / commands apply), each reply goes to stdout
// followed by a newline (a reply may contain newlines of its own), and each turn's statistics
// are a line on stderr; the exit status is 1 when the model failed or every turn was refused.
#include <cstdio>
#include <iostream>
#include <string>

#include "chat_terminal.h"
#include "cli_common.h"
#include "guarded_main.h"
#include "kuiper/generation/chat_template_choice.h"
#include "kuiper/generation/conversation.h"

namespace kuiper {
namespace {

constexpr const char* kProgram = "llama_chat";

struct ChatFlags {
  std::string system;
  std::string chat_template = "auto";
  int max_reply = 256;
};

// What one input line asks for.
enum class Command { kTurn, kEmpty, kReset, kStats, kExit };

Command classify(const std::string& line) {
  const std::string_view text = strip_message(line);
  if (text.empty()) return Command::kEmpty;
  if (text == "/reset") return Command::kReset;
  if (text == "/stats") return Command::kStats;
  if (text == "/exit") return Command::kExit;
  return Command::kTurn;
}

class Chat {
 public:
  Chat(Conversation& conversation, Session& session, bool interactive)
      : conversation_(conversation), session_(session), interactive_(interactive) {}

  // Whether the chat ended because the model failed.
  bool failed() const { return failed_; }
  // Whether turns were asked for and every one of them was refused.
  bool all_refused() const { return refused_ > 0 && !answered_; }

  // Handles one input line; false when the chat should end.
  bool handle(const std::string& line) {
    switch (classify(line)) {
      case Command::kEmpty: return true;
      case Command::kExit: return false;
      case Command::kReset:
        conversation_.reset();
        std::fprintf(stderr, "(conversation reset)\n");
        return true;
      case Command::kStats:
        print_stats(interactive_ ? stdout : stderr);
        return true;
      case Command::kTurn:
        return turn(line);
    }
    return true;
  }

 private:
  bool turn(const std::string& line) {
    // Cleared before the reply is announced: a Ctrl-C typed as soon as "assistant>" shows must
    // stop this reply, not be wiped out by a clear that comes after it.
    cli::clear_interrupt();
    if (interactive_) std::fputs("assistant> ", stdout);
    std::fflush(stdout);
    bool reply_started = false;  // leading whitespace of a reply is not shown (the template strips it)
    auto stats = conversation_.reply(line, [&](std::string_view piece) {
      if (!reply_started) {
        const size_t start = piece.find_first_not_of(" \t\r\n");
        piece.remove_prefix(start == std::string_view::npos ? piece.size() : start);
        reply_started = !piece.empty();
      }
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return !cli::interrupted();
    });
    if (stats.ok() && stats->generation.stop_reason == StopReason::kCallback) std::fputs(" [stopped]", stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!stats.ok()) {
      // A turn that does not fit, or whose text the tokenizer refuses (invalid UTF-8), is refused
      // and the chat goes on; anything else is a failure of the model or device, after which
      // the cache cannot be trusted.
      const StatusCode code = stats.status().code();
      failed_ = code != StatusCode::kOutOfRange && code != StatusCode::kInvalidArgument;
      std::fprintf(stderr, "%s: %s%s\n", kProgram, failed_ ? "" : "turn refused: ", stats.status().message().c_str());
      refused_ += !failed_;
      return !failed_;
    }
    last_ = *stats;
    answered_ = true;
    if (last_.dropped_turns > 0) {
      std::fprintf(stderr, "%s: context full: dropped the %d oldest turn%s (the system prompt stays)\n", kProgram,
                   last_.dropped_turns, last_.dropped_turns == 1 ? "" : "s");
    }
    if (!interactive_) print_stats(stderr);
    return true;
  }

  void print_stats(std::FILE* out) const {
    if (!answered_) {
      std::fprintf(out, "context: %d/%d tokens | no turn yet\n", session_.position(), session_.context());
      return;
    }
    const GenerationStats& g = last_.generation;
    std::fprintf(out,
                 "context: %d/%d tokens | last turn: prefilled %d tokens (%.1f tokens/s), "
                 "replied %d tokens (%.1f tokens/s, %s)\n",
                 session_.position(), session_.context(), last_.prefilled_tokens, g.prefill_tokens_per_second(),
                 g.generated_tokens, g.decode_tokens_per_second(), stop_reason_name(g.stop_reason));
  }

  Conversation& conversation_;
  Session& session_;
  bool interactive_;
  TurnStats last_;
  bool answered_ = false;  // whether last_ describes a turn
  bool failed_ = false;
  int refused_ = 0;  // turns refused (too long for the context, or not UTF-8)
};

// The system prompt and the template's layout of a first turn, with the reserve for a reply,
// must fit the context: otherwise every turn would be refused.
Status check_opening_fits(const ChatTemplate& chat_template, const Conversation& conversation,
                          const Session& session, const std::string& system) {
  KUIPER_ASSIGN_OR_RETURN(auto opening, chat_template.open_turn(system, "", /*first_turn=*/true));
  const size_t needed = opening.size() + static_cast<size_t>(conversation.reply_reserve());
  if (needed <= static_cast<size_t>(session.context())) return ok_status();
  return out_of_range("the " + chat_template.name() + " layout of a first turn" +
                      (system.empty() ? "" : " with the system prompt") + " takes " + std::to_string(opening.size()) +
                      " tokens, plus " + std::to_string(conversation.reply_reserve()) +
                      " kept for the reply, but the context holds " + std::to_string(session.context()) +
                      " (raise --context" + (system.empty() ? "" : " or shorten --system") + ")");
}

int run(int argc, char** argv) {
  CLI::App app{"Chat with a LLaMA chat model, turn by turn.", kProgram};
  cli::ModelFlags flags;
  flags.sampler.temperature = 0.6f;  // the reference chat example's default
  ChatFlags chat;
  cli::add_model_flags(app, flags);
  app.add_option("--system", chat.system, "system prompt (default: none)");
  app.add_option("--template", chat.chat_template,
                 "chat layout: llama2, llama3, chatml, mistral, or auto (from the model's chat_template, "
                 "generation_config.json or tokenizer)")
      ->check(CLI::IsMember({"auto", "llama2", "llama3", "chatml", "mistral"}));
  app.add_option("--max-reply", chat.max_reply, "maximum tokens per reply")->check(CLI::Range(1, 1 << 24));
  if (auto code = cli::parse_or_exit_code(app, argc, argv)) return *code;
  if (Status text = cli::check_utf8_flag("--system", chat.system); !text.ok()) return cli::fail(kProgram, text);

  EngineOptions engine_options;
  engine_options.max_seqs = 1;  // one conversation; its turns share blocks through the prefix cache
  auto loaded = cli::load_engine(flags, engine_options);
  if (!loaded.ok()) return cli::fail(kProgram, loaded.status());
  auto kind = parse_chat_template_kind(chat.chat_template);
  if (!kind.ok()) return cli::fail(kProgram, kind.status());
  auto hints = read_chat_template_hints(loaded->model_path);
  if (!hints.ok()) return cli::fail(kProgram, hints.status());
  auto chat_template = choose_chat_template(*kind, *hints, *loaded->tokenizer);
  if (!chat_template.ok()) return cli::fail(kProgram, chat_template.status());

  Session session(*loaded->engine, cli::sampling_params(flags, chat.max_reply));
  Conversation conversation(session, **chat_template, chat.system, chat.max_reply);
  if (Status fits = check_opening_fits(**chat_template, conversation, session, chat.system); !fits.ok()) {
    return cli::fail(kProgram, fits);
  }
  const bool interactive = cli::stdin_is_terminal();
  Chat loop(conversation, session, interactive);
  std::fprintf(stderr, "%s: %s, %s template (%s), context %d tokens\n", kProgram, loaded->model_path.c_str(),
               (*chat_template)->name().c_str(), (*chat_template)->origin().c_str(), session.context());

  if (!interactive) {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!loop.handle(line)) break;
    }
    return loop.failed() || loop.all_refused() ? 1 : 0;
  }
  std::fprintf(stderr, "/reset starts over, /stats shows statistics, /exit or Ctrl-D quits, "
                       "Ctrl-C stops a reply.\n");
  cli::catch_interrupts();
  while (auto line = cli::read_line("user> ")) {
    if (!loop.handle(*line)) return loop.failed() ? 1 : 0;
  }
  return 0;
}

}  // namespace
}  // namespace kuiper

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  return kuiper::cli::guarded_main("llama_chat", [&] { return kuiper::run(argc, argv); });
}
