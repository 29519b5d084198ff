#!/usr/bin/env python3
"""Runs llama_chat scripted (stdin not a terminal) with the bundled stories260K model.

  three turns       one statistics line per turn on stderr; turns 2 and 3 prefill only their
                    own tokens (far fewer than the context holds), the context grows
  tiny context      -c 64 and turns that overflow it: the oldest turns are dropped (said on
                    stderr), every turn is still answered, the context never exceeds 64, a
                    message too long for the context is refused and the next one answered
  commands          /reset empties the context, /stats reports it, /exit ends the input early
  templates         a model directory's tokenizer_config.json chooses the template (said on
                    stderr); an unknown chat_template is one error line suggesting --template,
                    and --template overrides it
  refused at start  a context too small for the opening of a first turn, or a system prompt not
                    UTF-8, is one error line at start; every turn refused exits non-zero

Usage: chat_cli_script.py path/to/llama_chat
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

STATS = re.compile(r"^context: (\d+)/(\d+) tokens \| last turn: prefilled (\d+) tokens .*replied (\d+) tokens",
                   re.M)


def run(tool, lines, *flags):
    result = subprocess.run([tool, "--temp", "0", *flags], input="".join(l + "\n" for l in lines).encode(),
                            capture_output=True, timeout=120)
    stderr = result.stderr.decode(errors="replace")
    if result.returncode != 0:
        raise AssertionError(f"exit status {result.returncode}\n{stderr}")
    return result.stdout.decode(errors="replace"), stderr, [tuple(map(int, m)) for m in STATS.findall(stderr)]


def check(condition, message, stderr=""):
    if not condition:
        raise AssertionError(message + ("\n--- stderr ---\n" + stderr if stderr else ""))


def three_turns(tool):
    stdout, stderr, stats = run(tool, ["Tell me a story about a cat.", "What happened next?", "How did it end?"],
                                "--max-reply", "30", "--system", "You tell stories.")
    check(len(stats) == 3, f"expected 3 statistics lines, got {len(stats)}", stderr)
    check(stdout.count("\n") >= 3 and stdout.strip(), "expected three replies on stdout:\n" + stdout)
    contexts = [s[0] for s in stats]
    check(contexts == sorted(contexts) and contexts[0] < contexts[2], f"context did not grow: {contexts}")
    for previous, (context, _, prefilled, replied) in zip(stats, stats[1:]):
        # The new turn adds what it prefilled plus its reply on top of the previous context.
        check(context == previous[0] + prefilled + replied, f"turn re-read the conversation: {stats}", stderr)
        check(prefilled < 40, f"a short turn prefilled {prefilled} tokens", stderr)


def tiny_context(tool):
    long_line = "The little dog ran to the park and played with a big red ball. " * 6
    turns = ["Tell me about the dog", "What did the dog do", "And the cat", long_line, "Where did they go",
             "The end"]
    stdout, stderr, stats = run(tool, turns, "-c", "64", "--max-reply", "40")
    check("dropped the" in stderr, "no turn was dropped", stderr)
    check("context holds 64" in stderr, "the overlong message was not refused", stderr)
    check(len(stats) == len(turns) - 1, f"expected {len(turns) - 1} answered turns, got {len(stats)}", stderr)
    check(all(context <= 64 for context, *_ in stats), f"context overflow: {stats}", stderr)


def commands(tool):
    _, stderr, stats = run(tool, ["Hello", "/stats", "/reset", "/stats", "Hello", "/exit", "never read"],
                           "--max-reply", "10")
    # Statistics after each of the two turns, and for each /stats.
    check(len(stats) == 4, f"expected 4 statistics lines, got {len(stats)}", stderr)
    check(stats[0][0] == stats[1][0] > 0, f"/stats disagrees with the turn: {stats}", stderr)
    check(stats[2][0] == 0, f"/reset left {stats[2][0]} tokens in the context", stderr)
    check(stats[3] == stats[0], f"the same first turn after /reset differs: {stats}", stderr)


def templates(tool):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as directory:
        model = os.path.join(directory, "stories260K.bin")
        shutil.copy(os.path.join(root, "models/stories260K/stories260K.bin"), model)
        shutil.copy(os.path.join(root, "models/stories260K/tok512.model"), directory)
        config = os.path.join(directory, "tokenizer_config.json")
        with open(config, "w") as f:
            json.dump({"chat_template": "{{ bos_token }}{% for m in messages %}{{ ' [INST] ' + m['content'] + "
                                        "' [/INST]' }}{% endfor %}"}, f)
        _, stderr, stats = run(tool, ["Hello"], "-m", model, "--max-reply", "5")
        check("mistral template (identified Mistral instruct v1 in " in stderr and len(stats) == 1,
              "the Mistral template was not identified", stderr)
        with open(config, "w") as f:
            json.dump({"chat_template": "<start_of_turn>{{ m }}<end_of_turn>"}, f)
        result = subprocess.run([tool, "-m", model], input=b"Hello\n", capture_output=True, timeout=60)
        error = result.stderr.decode(errors="replace").strip()
        check(result.returncode != 0 and "--template" in error and "tokenizer_config.json" in error
              and len(error.splitlines()) == 1, f"unknown template: exit {result.returncode}, stderr:\n{error}")
        _, stderr, stats = run(tool, ["Hello"], "-m", model, "--max-reply", "5", "--template", "llama2")
        check("llama2 template (chosen with --template)" in stderr and len(stats) == 1,
              "--template did not override the unknown template", stderr)


def refused_at_start(tool):
    """A context that cannot hold the opening of a first turn and one token of reply, or a system
    prompt that is not UTF-8, is one error line at start; a script whose every turn is refused
    exits non-zero."""
    long_system = "You are a storyteller who tells long stories about dogs and cats. " * 8
    for name, flags, phrase in [
        ("-c 1", ["-c", "1"], "context holds 1"),
        ("system prompt beyond the context", ["-c", "64", "--system", long_system], "shorten --system"),
        ("system prompt not UTF-8", ["--system", "caf\udce9"], "--system is not valid UTF-8"),
    ]:
        result = subprocess.run([tool, "--temp", "0", *flags], input=b"Hello\n", capture_output=True, timeout=60)
        error = result.stderr.decode(errors="replace").strip()
        check(result.returncode != 0 and len(error.splitlines()) == 1 and phrase in error,
              f"{name}: exit {result.returncode}, want non-zero and one line with {phrase!r}", error)
    long_line = "The little dog ran to the park and played with a big red ball. " * 6
    result = subprocess.run([tool, "--temp", "0", "-c", "64"], input=(long_line + "\n").encode() * 2,
                            capture_output=True, timeout=60)
    stderr = result.stderr.decode(errors="replace")
    check(result.returncode != 0 and stderr.count("turn refused") == 2,
          f"every turn refused: exit {result.returncode}, want non-zero", stderr)


def main():
    tool = sys.argv[1]
    for test in (three_turns, tiny_context, commands, templates, refused_at_start):
        test(tool)
        print(f"{test.__name__}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
