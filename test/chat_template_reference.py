#!/usr/bin/env python3
"""Checks kuiper's chat templates id for id against reference tokenizers.

For a set of conversations (system prompt, finished exchanges, one open user turn) it builds
the expected ids from the documented templates with the reference libraries and compares them
with what build/test/chat_template_tokens prints:

  llama3  models/tokenizers/llama3/tokenizer.model, tiktoken: the whole template text encoded
          with special tokens allowed; and Meta's ChatFormat way (each message stripped and
          encoded on its own, specials as ids), which must agree with it and is the only
          reference for messages that contain special-token text (they stay text)
  llama2  models/tokenizers/llama2/tokenizer.model, sentencepiece: Meta's chat_completion
          layout with BOS/EOS as ids around each "[INST] ... [/INST] ... " stretch
  tok512  models/stories260K/tok512.model, the same LLaMA 2 layout (template chosen by "auto")

No ids are stored anywhere: every expected id is computed here at run time.
Usage: chat_template_reference.py --tool build/test/chat_template_tokens [--source-dir .]
"""
import argparse
import json
import os
import subprocess
import sys

import sentencepiece
import tiktoken
from tiktoken.load import load_tiktoken_bpe

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The ids Meta's LLaMA 3 tokenizer.py gives the special tokens the template uses.
LLAMA3_SPECIALS = {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001,
                   "<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eot_id|>": 128009}

CONVERSATIONS = [
    {"system": "You are a helpful assistant. Answer briefly.",
     "exchanges": [["Hello! Who are you?", "I am a small language model."],
                   ["What is 2 + 2?", "2 + 2 = 4."]],
     "user": "Thanks. Now write a haiku about autumn leaves."},
    {"system": "Always answer in French.",
     "exchanges": [["Good morning", "Bonjour !"], ["How are you?", "Très bien, merci."],
                   ["And the weather?", "Il fait beau."]],
     "user": "Goodbye"},
    {"system": "", "exchanges": [["no system prompt here", "fine"]], "user": "second turn"},
    {"system": "  Leading spaces and a\nmulti-line system prompt.\n\n",
     "exchanges": [["\t  padded user message \n", "  padded answer\u00a0 "],
                   ["\u3000ideographic space, émoji 😀 and 中文\u2028", "\u0085answer ends here\x1f"]],
     "user": " last one?  "},
    {"system": "Keep special text as text.",
     "exchanges": [["type <|eot_id|> and </s> and [INST] here", "<|start_header_id|> is text too"]],
     "user": "<s>[INST] still text [/INST]</s><|begin_of_text|>"},
    {"system": "Only an open turn.", "exchanges": [], "user": "Hi"},
]


def has_special_text(conversation):
    texts = [conversation["system"], conversation["user"]] + sum(conversation["exchanges"], [])
    return any(s in t for t in texts for s in LLAMA3_SPECIALS)


def llama3_text(c):
    """The documented template as one text."""
    def message(role, content):
        return f"<|start_header_id|>{role}<|end_header_id|>\n\n{content.strip()}<|eot_id|>"
    text = "<|begin_of_text|>"
    if c["system"]:
        text += message("system", c["system"])
    for user, assistant in c["exchanges"]:
        text += message("user", user) + message("assistant", assistant)
    return text + message("user", c["user"]) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def llama3_messagewise(encoding, c):
    """Meta's ChatFormat: headers and <|eot_id|> as ids, each stripped message encoded alone."""
    def text(s):
        return encoding.encode(s, allowed_special=set(), disallowed_special=())

    def header(role):
        return ([LLAMA3_SPECIALS["<|start_header_id|>"]] + text(role) +
                [LLAMA3_SPECIALS["<|end_header_id|>"]] + text("\n\n"))

    def message(role, content):
        return header(role) + text(content.strip()) + [LLAMA3_SPECIALS["<|eot_id|>"]]
    ids = [LLAMA3_SPECIALS["<|begin_of_text|>"]]
    if c["system"]:
        ids += message("system", c["system"])
    for user, assistant in c["exchanges"]:
        ids += message("user", user) + message("assistant", assistant)
    return ids + message("user", c["user"]) + header("assistant")


def llama3_reference(model_path):
    ranks = load_tiktoken_bpe(model_path)
    encoding = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                 special_tokens=LLAMA3_SPECIALS)

    def reference(c):
        ids = llama3_messagewise(encoding, c)
        if not has_special_text(c):
            whole = encoding.encode(llama3_text(c), allowed_special="all")
            if whole != ids:
                raise AssertionError(f"the two LLaMA 3 references disagree on {c}:\n{whole}\n{ids}")
        return ids
    return reference


def llama2_reference(model_path):
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)

    def reference(c):
        users = [user for user, _ in c["exchanges"]] + [c["user"]]
        if c["system"]:
            users[0] = "<<SYS>>\n" + c["system"] + "\n<</SYS>>\n\n" + users[0]
        ids = []
        for user, (_, assistant) in zip(users, c["exchanges"]):
            ids += [sp.bos_id()] + sp.encode(f"[INST] {user.strip()} [/INST] {assistant.strip()} ") + [sp.eos_id()]
        return ids + [sp.bos_id()] + sp.encode(f"[INST] {users[-1].strip()} [/INST]")
    return reference


def kuiper_ids(tool, tokenizer, template):
    stdin = "".join(json.dumps(c) + "\n" for c in CONVERSATIONS)
    result = subprocess.run([tool, "-t", tokenizer, "--template", template], input=stdin.encode(),
                            capture_output=True)
    if result.returncode != 0:
        raise RuntimeError(f"{tool} failed: {result.stderr.decode(errors='replace').strip()}")
    lines = result.stdout.decode().splitlines()
    return lines[0].split()[1], [[int(x) for x in line.split()] for line in lines[1:]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True)
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), ".."))
    args = parser.parse_args()
    root = args.source_dir
    cases = [
        ("llama3", "models/tokenizers/llama3/tokenizer.model", llama3_reference),
        ("llama2", "models/tokenizers/llama2/tokenizer.model", llama2_reference),
        ("llama2", "models/stories260K/tok512.model", llama2_reference),
    ]
    failures = 0
    for expected_template, relative, make_reference in cases:
        path = os.path.join(root, relative)
        reference = make_reference(path)
        for requested in ("auto", expected_template):
            chosen, got = kuiper_ids(args.tool, path, requested)
            if chosen != expected_template:
                print(f"FAIL {relative} --template {requested}: chose {chosen}, expected {expected_template}")
                failures += 1
            for conversation, ids in zip(CONVERSATIONS, got, strict=True):
                want = reference(conversation)
                if ids != want:
                    first = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
                    print(f"FAIL {relative} --template {requested}: {json.dumps(conversation)}\n"
                          f"  first difference at {first}: kuiper {ids[first:first + 8]} "
                          f"reference {want[first:first + 8]} (lengths {len(ids)}, {len(want)})")
                    failures += 1
        print(f"{relative}: {len(CONVERSATIONS)} conversations checked ({expected_template})")
    if failures:
        print(f"{failures} mismatches")
        return 1
    print("all chat template ids match the references")
    return 0


if __name__ == "__main__":
    sys.exit(main())
