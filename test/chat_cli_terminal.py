#!/usr/bin/env python3
"""Drives llama_chat in a pseudo-terminal, as a person at a keyboard would.

Types two turns and reads two streamed replies, recalls the previous line from readline's
history with the up arrow, presses Ctrl-C at the prompt (the line is dropped, the program stays),
asks for /stats, and quits with Ctrl-D, expecting exit status 0. Then, in a second chat with long
replies, presses Ctrl-C as soon as a reply starts: the reply stops, the program goes on. Needs
only Python's pty module.

Usage: chat_cli_terminal.py path/to/llama_chat
"""
import os
import pty
import re
import select
import sys
import time

PROMPT = b"user> "
TIMEOUT = 60


class Terminal:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.output = b""  # everything the program wrote, as the terminal shows it

    def read_until(self, marker, start):
        """Reads until `marker` appears after offset `start`; returns the offset after it."""
        deadline = time.monotonic() + TIMEOUT
        while (found := self.output.find(marker, start)) < 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {marker!r} within {TIMEOUT}s; the terminal shows:\n{self.text()}")
            ready, _, _ = select.select([self.fd], [], [], 1)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the program ended
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"program ended before {marker!r}; the terminal shows:\n{self.text()}")
                self.output += chunk
        return found + len(marker)

    def type(self, keys):
        os.write(self.fd, keys)

    def exit_status(self):
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.fd, 4096)  # drained, so the program never blocks
                except OSError:
                    time.sleep(0.05)
        raise AssertionError(f"program did not exit; the terminal shows:\n{self.text()}")

    def text(self):
        return self.output.decode(errors="replace")


def turn(terminal, start, line):
    """Types a user line; returns (reply shown, offset after the next prompt)."""
    terminal.type(line + b"\r")
    reply_start = terminal.read_until(b"assistant> ", start)
    end = terminal.read_until(PROMPT, reply_start)
    return terminal.output[reply_start:end - len(PROMPT)].decode(errors="replace").strip(), end


def basic_session(tool):
    terminal = Terminal([tool, "--temp", "0", "--max-reply", "24", "--system", "You tell stories."])
    at = terminal.read_until(PROMPT, 0)

    first, at = turn(terminal, at, b"Tell me a story about a cat.")
    second, at = turn(terminal, at, b"What happened next?")
    for name, reply in (("first", first), ("second", second)):
        if not re.search(r"\w", reply):
            raise AssertionError(f"the {name} reply is empty; the terminal shows:\n{terminal.text()}")

    # Up arrow brings back the previous line; Ctrl-C drops it and gives a fresh prompt.
    terminal.type(b"\x1b[A")
    at = terminal.read_until(b"What happened next?", at)
    terminal.type(b"\x03")
    at = terminal.read_until(PROMPT, at)

    terminal.type(b"/stats\r")
    at = terminal.read_until(b"context: ", at)
    at = terminal.read_until(PROMPT, at)
    stats = terminal.output.decode(errors="replace")
    if not re.search(r"context: \d+/512 tokens \| last turn: prefilled \d+ tokens", stats):
        raise AssertionError(f"/stats shows no statistics:\n{terminal.text()}")

    terminal.type(b"\x04")  # Ctrl-D on an empty line ends the chat
    status = terminal.exit_status()
    if status != 0:
        raise AssertionError(f"exit status {status}; the terminal shows:\n{terminal.text()}")
    print("two streamed replies, history, Ctrl-C at the prompt, /stats, Ctrl-D: ok")


def ctrl_c_stops_a_reply(tool):
    # A 500-token reply takes the small model tens of milliseconds: Ctrl-C typed the moment the
    # reply starts usually lands inside it; a few tries make a miss on a busy machine unlikely.
    terminal = Terminal([tool, "--temp", "1", "--seed", "3", "--max-reply", "500"])
    at = terminal.read_until(PROMPT, 0)
    for _ in range(5):
        terminal.type(b"/reset\rTell me a very long story\r")
        at = terminal.read_until(b"assistant> ", at)
        terminal.type(b"\x03")
        reply_end = terminal.read_until(PROMPT, at)
        if b"[stopped]" in terminal.output[at:reply_end]:
            break
        at = reply_end
    else:
        raise AssertionError(f"Ctrl-C never stopped a reply; the terminal shows:\n{terminal.text()}")
    terminal.type(b"/exit\r")
    status = terminal.exit_status()
    if status != 0:
        raise AssertionError(f"exit status {status} after Ctrl-C; the terminal shows:\n{terminal.text()}")
    print("Ctrl-C during a reply stops it and the chat goes on: ok")


def main():
    tool = sys.argv[1]
    basic_session(tool)
    ctrl_c_stops_a_reply(tool)
    return 0


if __name__ == "__main__":
    sys.exit(main())
