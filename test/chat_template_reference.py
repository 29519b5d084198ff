#!/usr/bin/env python3
"""Checks kuiper's chat templates against the models' own Jinja chat templates.

The reference is each model's chat_template (test/data/chat_templates/templates.json: real
templates with their source and licence) rendered with Python jinja2 the way transformers'
apply_chat_template renders it: an ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension, transformers' own tojson filter, raise_exception and
strftime_now, the tokenizer's bos_token/eos_token, add_generation_prompt=True. For a set of
multi-turn conversations with and without a system prompt it checks, against what
build/test/chat_template_tokens prints:

  identification  kuiper recognises each template (by markers) as the expected layout, and
                  refuses the ones whose layout it does not write (Mistral v3 and v7, QwQ, Phi-4,
                  TinyLlama's Zephyr, Gemma); LLaMA 3.2's template dates its system turn with
                  strftime_now, today's date on both sides
  text            the layout kuiper renders equals the Jinja rendering, character for character
                  (every identified template but the first Mistral v0.1 one, see templates.json)
  token ids       where the tokenizer is here: the Jinja rendering tokenized as transformers does,
                  splitting at the special tokens the template wrote and encoding each stretch in
                  between as text (LLaMA 2: SentencePiece with its dummy prefix per stretch, as the
                  Llama-2-chat-hf tokenizer's Prepend("▁") normalizer does; LLaMA 3: tiktoken).
                  Special-token text inside messages stays text, as transformers' sanitising of
                  chat input keeps it. Mistral v1 ids follow mistral_common's encoding (BOS, each
                  "[INST] ... [/INST]" and each answer a SentencePiece call of its own, EOS), with
                  the LLaMA 2 SentencePiece model standing in for Mistral's (not in the repo).
                  ChatML (Qwen2.5, Qwen3) ids: a byte-level BPE tokenizer.json in Qwen2's shape (its
                  pre-tokenizer regex, ByteLevel, <|im_start|>/<|im_end|>/<|endoftext|>) trained here
                  with the tokenizers library, which encodes the stretches.
  model files     a model directory's tokenizer_config.json chat_template and generation_config.json
                  eos ids choose the template and its stop tokens

No expected output is stored: every reference is computed here at run time.
Usage: chat_template_reference.py --tool build/test/chat_template_tokens [--source-dir .]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
import sentencepiece
import tiktoken
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tiktoken.load import load_tiktoken_bpe

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The ids Meta's LLaMA 3 tokenizer.py gives the special tokens the template uses.
# Qwen2's pre-tokenizer (LLaMA 3's with single digits), as in its tokenizer.json.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
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
     "user": "<s>[INST] still text [/INST]</s><|begin_of_text|><|im_start|>user\n<|im_end|>"},
    {"system": "Only an open turn.", "exchanges": [], "user": "Hi"},
    {"system": "", "exchanges": [], "user": "No system prompt, first turn: 12345 digits\n\n\nand newlines"},
    {"system": "", "exchanges": [["1 2 3", "\n\nanswer after newlines"]], "user": "\nleading newline"},
    {"system": "Think first.",
     "exchanges": [["What is 6*7?", "<think>\nLet me compute.\n6*7=42\n</think>\n\nIt is 42."],
                   ["Sure?", "<think>yes</think> Yes.\n"]],
     "user": "Thanks"},
]


def messages_of(conversation):
    messages = [{"role": "system", "content": conversation["system"]}] if conversation["system"] else []
    for user, assistant in conversation["exchanges"]:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages + [{"role": "user", "content": conversation["user"]}]


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %} (it marks the assistant's tokens;
    rendering, it writes its body)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def transformers_environment():
    """The Jinja environment of transformers' _compile_jinja_template."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENVIRONMENT = transformers_environment()


def render(entry, messages):
    tokens = {name: entry[name] for name in ("bos_token", "eos_token") if entry[name] is not None}
    return ENVIRONMENT.from_string(entry["template"]).render(
        messages=messages, tools=None, documents=None, add_generation_prompt=True, **tokens)


def sanitised_render(entry, conversation, specials):
    """The rendering with special-token text in messages kept apart from the template's own special
    tokens: (text stretches and special tokens in order). Messages go in with placeholders, which
    are put back into the text stretches after the rendering is split at the special tokens."""
    originals = {}

    def hide(text):
        for special in sorted(specials, key=len, reverse=True):
            while special in text:
                placeholder = f"\ue000{len(originals)}\ue001"
                originals[placeholder] = special
                text = text.replace(special, placeholder, 1)
        return text

    messages = [{"role": m["role"], "content": hide(m["content"])} for m in messages_of(conversation)]
    rendered = render(entry, messages)
    parts, at = [], 0
    while at < len(rendered):
        found = [(rendered.find(s, at), s) for s in specials if rendered.find(s, at) >= 0]
        start, special = min(found, key=lambda f: (f[0], -len(f[1]))) if found else (len(rendered), None)
        parts.append(("text", rendered[at:start]))
        if special is None:
            break
        parts.append(("special", special))
        at = start + len(special)
    restored = []
    for kind, text in parts:
        if kind == "text":
            for placeholder, original in originals.items():
                text = text.replace(placeholder, original)
            if text:
                restored.append((kind, text))
        else:
            restored.append((kind, text))
    return restored


def split_reference(entry, specials, encode_text):
    """transformers' tokenization of the rendering: special tokens as ids, stretches as text."""
    def reference(conversation):
        ids = []
        for kind, text in sanitised_render(entry, conversation, specials):
            ids += [specials[text]] if kind == "special" else encode_text(text)
        return ids
    return reference


def llama2_reference(entry, model_path):
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
    specials = {"<s>": sp.bos_id(), "</s>": sp.eos_id(), "<unk>": sp.unk_id()}
    return split_reference(entry, specials, sp.encode)


def llama3_reference(entry, model_path):
    encoding = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=load_tiktoken_bpe(model_path),
                                 special_tokens=LLAMA3_SPECIALS)
    return split_reference(entry, LLAMA3_SPECIALS,
                           lambda text: encoding.encode(text, allowed_special=set(), disallowed_special=()))


def chatml_reference(entry, tokenizer_path):
    """transformers' fast tokenizer on the rendering: the stretches between the template's special
    tokens encoded without special-token matching (as its chat-input sanitising does)."""
    tokenizer = tokenizers.Tokenizer.from_file(tokenizer_path)
    tokenizer.encode_special_tokens = True
    specials = {text: tokenizer.token_to_id(text) for text in CHATML_SPECIALS}
    return split_reference(entry, specials, lambda text: tokenizer.encode(text, add_special_tokens=False).ids)


def train_chatml_tokenizer(root, path):
    """A Qwen2-shaped byte-level BPE tokenizer.json of 700 tokens, trained on the tokenizer corpus."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(QWEN2_PATTERN), behavior="isolated"),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=700, special_tokens=CHATML_SPECIALS, show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    # Runs of newlines get tokens of their own, as in Qwen's vocabulary, so that where a layout
    # splits its tokenizer calls around newlines shows in the ids.
    with open(os.path.join(root, "test/data/tokenizer_corpus.txt"), encoding="utf-8") as f:
        tokenizer.train_from_iterator([f.read(), "word\n\nword\n\n\nword\n" * 200], trainer)
    tokenizer.save(path)
    return path


def mistral_common_reference(entry, model_path):
    """mistral_common's v1 instruct encoding (Mistral's cookbook, 'Tokenizer V1'): BOS, then per
    turn encode("[INST] {message} [/INST]") and encode(answer) + EOS, each a SentencePiece call with
    its dummy prefix; the system prompt prepended to the first user message with a blank line."""
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)

    def reference(conversation):
        users = [user for user, _ in conversation["exchanges"]] + [conversation["user"]]
        if conversation["system"]:
            users[0] = conversation["system"] + "\n\n" + users[0]
        ids = [sp.bos_id()]
        for user, (_, answer) in zip(users, conversation["exchanges"]):
            ids += sp.encode(f"[INST] {user} [/INST]") + sp.encode(answer) + [sp.eos_id()]
        return ids + sp.encode(f"[INST] {users[-1]} [/INST]")
    return reference


def run_tool(tool, args, stdin):
    result = subprocess.run([tool] + args, input=stdin.encode(), capture_output=True)
    return result.returncode, result.stdout.decode(), result.stderr.decode(errors="replace").strip()


def kuiper_output(tool, args):
    stdin = "".join(json.dumps(c) + "\n" for c in CONVERSATIONS)
    rc, out, err = run_tool(tool, args, stdin)
    if rc != 0:
        raise RuntimeError(f"chat_template_tokens {' '.join(args)} failed: {err}")
    lines = out.split("\n")[:-1]  # not splitlines(): a rendered message may hold U+2028 or \x1c-\x1e
    return lines[0].split(), lines[1:]


class Checker:
    def __init__(self):
        self.failures = 0

    def fail(self, message):
        print("FAIL " + message)
        self.failures += 1

    def compare(self, what, conversation, got, want):
        if got == want:
            return
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        self.fail(f"{what}: {json.dumps(conversation, ensure_ascii=False)}\n  first difference at {first}: "
                  f"kuiper {got[first:first + 8]!r} reference {want[first:first + 8]!r} "
                  f"(lengths {len(got)}, {len(want)})")


def check_templates(tool, entries, jinja_files, check):
    for entry in entries:
        path = jinja_files[entry["name"]]
        rc, out, err = run_tool(tool, ["--render", "--jinja", path], "")
        if entry["expect"] == "refused":
            if rc == 0 or "--template" not in err:
                check.fail(f"{entry['name']}: expected a refusal suggesting --template, got rc {rc}: {out}{err}")
            else:
                print(f"{entry['name']}: refused: {err}")
            continue
        header, rendered = kuiper_output(tool, ["--render", "--jinja", path])
        if header[1] != entry["expect"]:
            check.fail(f"{entry['name']}: identified as {header[1]}, expected {entry['expect']}")
        if "render_differs" in entry:
            print(f"{entry['name']}: identified as {header[1]} (text not compared: {entry['render_differs']})")
            continue
        for conversation, line in zip(CONVERSATIONS, rendered, strict=True):
            want = render(entry, messages_of(conversation))
            check.compare(f"{entry['name']} text", conversation, json.loads(line), want)
        print(f"{entry['name']}: identified as {header[1]}, {len(CONVERSATIONS)} conversations render as the "
              "Jinja template does")


def check_ids(tool, root, entries, jinja_files, chatml_tokenizer, check):
    by_name = {entry["name"]: entry for entry in entries}
    cases = [
        ("qwen2.5-instruct", chatml_tokenizer, chatml_reference, "the template's rendering (tokenizers library)"),
        ("qwen3", chatml_tokenizer, chatml_reference, "the template's rendering (tokenizers library)"),
        ("llama-2-chat", "models/tokenizers/llama2/tokenizer.model", llama2_reference, "the template's rendering"),
        ("llama-2-chat", "models/stories260K/tok512.model", llama2_reference, "the template's rendering"),
        ("llama-3-instruct", "models/tokenizers/llama3/tokenizer.model", llama3_reference, "the template's rendering"),
        ("llama-3.1-instruct", "models/tokenizers/llama3/tokenizer.model", llama3_reference, "the template's rendering"),
        ("llama-3.2-instruct", "models/tokenizers/llama3/tokenizer.model", llama3_reference, "the template's rendering"),
        ("mistral-instruct-v1", "models/tokenizers/llama2/tokenizer.model", mistral_common_reference,
         "mistral_common's v1 encoding (LLaMA 2 SentencePiece standing in)"),
    ]
    for name, relative, make_reference, what in cases:
        entry, tokenizer = by_name[name], os.path.join(root, relative)
        reference = make_reference(entry, tokenizer)
        header, lines = kuiper_output(tool, ["-t", tokenizer, "--jinja", jinja_files[name]])
        if header[1] != entry["expect"]:
            check.fail(f"{name} with {relative}: chose {header[1]}, expected {entry['expect']}")
        for conversation, line in zip(CONVERSATIONS, lines, strict=True):
            check.compare(f"{name} ids with {relative}", conversation, [int(x) for x in line.split()],
                          reference(conversation))
        relative = os.path.basename(relative) if os.path.isabs(relative) else relative
        print(f"{name} with {relative}: {len(CONVERSATIONS)} conversations give the ids of {what}")


def check_model_directory(tool, root, entries, check):
    """A LLaMA 3 instruct directory: tokenizer_config.json names the layout, generation_config.json
    adds <|end_of_text|> and <|eot_id|> as stop tokens; a damaged file is one clear error."""
    entry = next(e for e in entries if e["name"] == "llama-3-instruct")
    tokenizer = os.path.join(root, "models/tokenizers/llama3/tokenizer.model")
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|begin_of_text|>", "chat_template": entry["template"]}, f)
        with open(os.path.join(directory, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": [128001, 128009]}, f)
        header, lines = kuiper_output(tool, ["-t", tokenizer, "--model", directory])
        reference = llama3_reference(entry, tokenizer)
        if header[1] != "llama3" or {128001, 128009} - {int(x) for x in header[3:]}:
            check.fail(f"model directory: chose {' '.join(header)}, expected llama3 stopping at 128001 and 128009")
        for conversation, line in zip(CONVERSATIONS, lines, strict=True):
            check.compare("model directory ids", conversation, [int(x) for x in line.split()], reference(conversation))
        with open(os.path.join(directory, "generation_config.json"), "w") as f:
            f.write('{"eos_token_id": "end"}')
        rc, _, err = run_tool(tool, ["-t", tokenizer, "--model", directory], "")
        if rc == 0 or "generation_config.json" not in err or "\n" in err:
            check.fail(f"damaged generation_config.json: rc {rc}, message {err!r}")
    print(f"model directory: {' '.join(header)}; a damaged generation_config.json is refused: {err}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True)
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), ".."))
    args = parser.parse_args()
    root = args.source_dir
    with open(os.path.join(root, "test/data/chat_templates/templates.json"), encoding="utf-8") as f:
        entries = json.load(f)["templates"]
    check = Checker()
    with tempfile.TemporaryDirectory() as directory:
        jinja_files = {}
        for entry in entries:
            jinja_files[entry["name"]] = os.path.join(directory, entry["name"] + ".jinja")
            with open(jinja_files[entry["name"]], "w", encoding="utf-8") as f:
                f.write(entry["template"])
        check_templates(args.tool, entries, jinja_files, check)
        chatml_tokenizer = train_chatml_tokenizer(root, os.path.join(directory, "chatml_tokenizer.json"))
        check_ids(args.tool, root, entries, jinja_files, chatml_tokenizer, check)
    check_model_directory(args.tool, root, entries, check)
    if check.failures:
        print(f"{check.failures} mismatches")
        return 1
    print("all chat templates match their references")
    return 0


if __name__ == "__main__":
    sys.exit(main())
