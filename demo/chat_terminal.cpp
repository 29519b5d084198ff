#include "chat_terminal.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

namespace kuiper::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) { g_interrupted = 1; }

// Readline calls this about ten times a second while it waits for a key. After Ctrl-C (which
// readline has already echoed as "^C" and passed on to on_sigint) it ends the line being typed,
// and read_line drops it. Polling, rather than readline's signal hook, also catches a Ctrl-C
// that arrives while readline is busy between reads, e.g. in the middle of an escape sequence.
int end_line_on_interrupt() {
  if (g_interrupted) rl_done = 1;
  return 0;
}

}  // namespace

bool stdin_is_terminal() { return isatty(STDIN_FILENO) == 1; }

void catch_interrupts() {
  struct sigaction action = {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  rl_event_hook = end_line_on_interrupt;
}

bool interrupted() { return g_interrupted != 0; }
void clear_interrupt() { g_interrupted = 0; }

std::optional<std::string> read_line(const std::string& prompt) {
  clear_interrupt();  // a Ctrl-C from before the prompt was for the reply that ended
  char* raw = readline(prompt.c_str());
  if (raw == nullptr) return std::nullopt;
  std::string line(raw);
  std::free(raw);
  if (interrupted()) {  // Ctrl-C: the line is discarded, as a shell does
    clear_interrupt();
    return std::string();
  }
  if (!line.empty()) add_history(line.c_str());
  return line;
}

}  // namespace kuiper::cli
