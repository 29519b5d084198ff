// The interactive side of llama_chat: lines read with GNU readline (editing, history), and Ctrl-C
// turned into a flag, so that it stops the reply being generated instead of the program; at the
// prompt it discards the line typed so far, as shells do.
#pragma once

#include <optional>
#include <string>

namespace kuiper::cli {

bool stdin_is_terminal();

// From now on Ctrl-C (SIGINT) sets the interrupt flag instead of ending the program.
void catch_interrupts();
// Whether Ctrl-C was pressed since the last clear_interrupt(); safe to poll while generating.
bool interrupted();
void clear_interrupt();

// A line typed at `prompt` (non-empty lines enter the history); nullopt at end of input (Ctrl-D).
std::optional<std::string> read_line(const std::string& prompt);

}  // namespace kuiper::cli
