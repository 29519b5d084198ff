#!/usr/bin/env python3
"""Checks kuiper's tokenizers id for id against the reference implementations.

For every case of test/data/tokenizer_corpus.txt (plus a few generated long cases) it encodes
with the reference library and with the built kuiper_tokenize program (in --batch mode), in
several option combinations, and checks that kuiper decodes the reference ids back to the
reference text. References:

  llama3       models/tokenizers/llama3/tokenizer.model   tiktoken.Encoding (ranks + the LLaMA 3
                                                           pattern + Meta's 256 special tokens)
  llama3-hf    a tokenizer.json generated here from the   the same tiktoken.Encoding
               same ranks (both merge spellings)
  llama2       models/tokenizers/llama2/tokenizer.model   sentencepiece
  tok512       models/stories260K/tok512.model            sentencepiece
  llama2c-bin  tok512.bin, and llama2's tokenizer.bin     sentencepiece on the matching .model,
               when ../shared/assets has it                on the cases where the two algorithms
                                                           agree by design (see below)
  hf families  real tokenizer.json files (Phi-3-mini,     the tokenizers library (HF's own) on
  (--hf-only)  phi-2: test/data/tokenizers) and files      the same file: ids with and without
               of the TinyLlama, LLaMA-2-hf, Mistral,      special-token parsing and BOS, decode
               LLaMA 3, Qwen2, Qwen3, SmolLM2 layouts      of the ids and of every id alone;
               written from them (hf_tokenizer_files.py)   tokenizer.model and TinyLlama's
                                                           tokenizer.json give the same ids

Exits non-zero on the first mismatch of any check, printing the case. Nothing here is a
golden file: every expected id comes from a reference library at run time.

Usage: tokenizer_reference.py --tool build/demo/kuiper_tokenize [--source-dir .] [--work-dir D]
"""
import argparse
import base64
import copy
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

import sentencepiece
import tiktoken
import tokenizers
from tiktoken.load import load_tiktoken_bpe

import hf_tokenizer_files
from hf_tokenizer_files import LLAMA3_PATTERN

# Cases for the tokenizer.json checks only: SentencePiece's own decoder drops every leading
# "▁"-only piece of a sequence, which kuiper's token-by-token SentencePiece decode does not
# (tok512 decodes this case with five leading spaces), so it stays out of the shared corpus.
HF_ONLY_CASES = ["\u2581 \u2581\u2581 already\u2581metaspace\u2581", "\u2581", " \u2581x"]

# Bytes that are not UTF-8: tokenizers takes only str, so neither side can encode them; kuiper
# must refuse them with an error rather than guess.
INVALID_UTF8 = [b"\xff", b"abc\x80def", b"\xe4\xb8", b"\xed\xa0\x80 surrogate", b"caf\xc3", b"\xc0\xaf overlong"]


def llama3_special_tokens():
    """Meta's Llama 3.1 tokenizer.py naming of ids 128000..128255."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
             "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    names += [f"<|reserved_special_token_{n}|>" for n in range(3, 3 + 256 - len(names))]
    assert len(names) == 256
    return names


def load_corpus(path):
    cases = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cases.append(json.loads(line))
    return cases


def long_cases():
    """Inputs long enough to stress regex backtracking and merge loops."""
    return [" " * 5000, " " * 5000 + "x", "\n" * 2000 + "end", "a" * 20000, "ab" * 8000,
            "1234567890" * 500, "😀" * 1000, "的" * 3000, ("word " * 2000).strip(),
            "\t" * 3000 + " " * 3000 + "\r\n" * 1000]


class Tool:
    def __init__(self, path):
        self.path = path

    def _run(self, tokenizer, lines, flags):
        stdin = "".join(line + "\n" for line in lines)
        result = subprocess.run([self.path, "-t", tokenizer, "--batch", *flags], input=stdin.encode(),
                                capture_output=True)
        if result.returncode != 0:
            raise RuntimeError(f"{self.path} -t {tokenizer} {' '.join(flags)} failed: "
                               f"{result.stderr.decode(errors='replace').strip()}")
        out = result.stdout.decode().split("\n")
        assert out[-1] == "" and len(out) == len(lines) + 1, "kuiper_tokenize answered wrong line count"
        return out[:-1]

    def encode(self, tokenizer, texts, bos, allow_special):
        flags = (["--bos"] if bos else []) + (["--allow-special"] if allow_special else [])
        lines = self._run(tokenizer, [t.encode("utf-8").hex() for t in texts], flags)
        return [[int(x) for x in line.split()] for line in lines]

    def refuses(self, tokenizer, raw):
        """Whether encoding the bytes `raw` fails, and the message."""
        result = subprocess.run([self.path, "-t", tokenizer, "--batch"], input=raw.hex().encode() + b"\n",
                                capture_output=True)
        return result.returncode != 0, result.stderr.decode(errors="replace").strip()

    def decode(self, tokenizer, id_lists):
        lines = self._run(tokenizer, [" ".join(map(str, ids)) for ids in id_lists], ["--decode"])
        return [bytes.fromhex(line) for line in lines]


class Report:
    def __init__(self):
        self.failed = False
        self.lines = []

    def check(self, name, texts, expected, actual, what="ids"):
        for text, want, got in zip(texts, expected, actual):
            if want != got:
                shown = text if len(text) < 300 else text[:300] + f"... ({len(text)} chars)"
                print(f"MISMATCH [{name}] {what} for {json.dumps(shown, ensure_ascii=False)}")
                print(f"  reference: {str(want)[:600]}")
                print(f"  kuiper:    {str(got)[:600]}")
                self.failed = True
                return False
        self.lines.append(f"{name}: {len(texts)}/{len(texts)} cases match ({what})")
        return True


def split_on_specials(text, specials):
    """Ordinary text and special-token strings, leftmost-longest first (kuiper's rule)."""
    if not specials:
        return [text]
    pattern = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
    return [part for part in re.split(f"({pattern})", text) if part]


def check_tiktoken(tool, report, name, tokenizer, encoding, texts, special_ids):
    for bos, allow in [(False, False), (True, False), (True, True)]:
        expected = []
        for text in texts:
            ids = encoding.encode(text, allowed_special="all" if allow else set(), disallowed_special=())
            expected.append(([128000] if bos else []) + ids)
        actual = tool.encode(tokenizer, texts, bos, allow)
        if not report.check(f"{name} bos={int(bos)} allow_special={int(allow)}", texts, expected, actual):
            return
        decoded = tool.decode(tokenizer, expected)
        want = [encoding.decode_bytes(ids) for ids in expected]
        if not report.check(f"{name} decode bos={int(bos)} allow_special={int(allow)}", texts, want,
                            decoded, "decoded bytes"):
            return
    # decode(encode(x)) == x, without special tokens (their text comes back as themselves too).
    plain = [encoding.encode(t, allowed_special=set(), disallowed_special=()) for t in texts]
    report.check(f"{name} round trip", texts, [t.encode() for t in texts], tool.decode(tokenizer, plain),
                 "decode(encode(x))")


def sentencepiece_reference(sp, text, bos, allow, specials):
    ids = [sp.bos_id()] if bos else []
    for part in (split_on_specials(text, specials) if allow else [text]):
        if allow and part in specials:
            ids.append(sp.piece_to_id(part))
        else:
            ids += sp.encode(part)
    return ids


def sentencepiece_decode_per_sequence(sp, ids):
    """SentencePiece's decode of each stretch that starts at <s>, concatenated.

    kuiper drops the dummy-prefix space of the first piece after every <s> (token_bytes sees
    only the previous token), where DecodeIds of a whole sequence drops it only at the very
    start. The two agree whenever <s> appears only first, which is what encode() produces
    without allow_special; with <s> inside the text, kuiper treats it as a new sequence.
    """
    cuts = [i for i, id in enumerate(ids) if id == sp.bos_id() and i > 0]
    pieces = [ids[a:b] for a, b in zip([0] + cuts, cuts + [len(ids)])]
    return b"".join(sp.decode(piece).encode() for piece in pieces)


def check_sentencepiece(tool, report, name, tokenizer, sp, texts):
    specials = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
    for bos, allow in [(False, False), (True, False), (True, True)]:
        expected = [sentencepiece_reference(sp, t, bos, allow, specials) for t in texts]
        actual = tool.encode(tokenizer, texts, bos, allow)
        if not report.check(f"{name} bos={int(bos)} allow_special={int(allow)}", texts, expected, actual):
            return
        decoded = tool.decode(tokenizer, expected)
        want = [sentencepiece_decode_per_sequence(sp, ids) for ids in expected]
        if not report.check(f"{name} decode bos={int(bos)} allow_special={int(allow)}", texts, want,
                            decoded, "decoded bytes"):
            return
    # Round trip where SentencePiece itself round-trips (tok512 folds runs of whitespace).
    kept = [t for t in texts if sp.decode(sp.encode(t)) == t]
    ids = [sp.encode(t) for t in kept]
    report.check(f"{name} round trip ({len(texts) - len(kept)} cases sentencepiece itself folds)", kept,
                 [t.encode() for t in kept], tool.decode(tokenizer, ids), "decode(encode(x))")


def llama2c_agrees_by_design(sp, text):
    """The cases where llama2.c's encode() and SentencePiece must give the same ids.

    llama2.c has no normalizer: it encodes the raw text. SentencePiece first normalizes it, and
    tok512's model has remove_extra_whitespaces, which drops leading and trailing whitespace and
    folds runs of spaces into one (llama2's model has no such rule). On text that SentencePiece
    normalizes, the two therefore differ by design; those cases are skipped and counted. Text
    that survives normalization unchanged must match exactly (llama2: every corpus case,
    including runs of whitespace and "<s>" written as text).
    """
    return sp.decode(sp.encode(text)) == text


def check_llama2c(tool, report, name, bin_path, sp, texts):
    kept = [t for t in texts if llama2c_agrees_by_design(sp, t)]
    skipped = len(texts) - len(kept)
    for bos in [False, True]:
        expected = [([1] if bos else []) + sp.encode(t) for t in kept]
        actual = tool.encode(bin_path, kept, bos, False)
        if not report.check(f"{name} vs sentencepiece bos={int(bos)} ({skipped} cases skipped by design)",
                            kept, expected, actual):
            return
    ids = [[1] + sp.encode(t) for t in kept]
    report.check(f"{name} decode", kept, [sp.decode(i).encode() for i in ids], tool.decode(bin_path, ids),
                 "decoded bytes")


def write_json(doc, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return path


def check_hf_file(tool, report, name, path, texts, invalid_utf8=False, kuiper_path=None):
    """kuiper against the tokenizers library on one tokenizer.json, every option combination.
    kuiper reads `kuiper_path` where given (the same tokenizer in another file, e.g. a GGUF).

    allow_special=0 is tokenizers' encode_special_tokens=True (special added tokens stay text,
    other added tokens are still matched); bos=1 is add_special_tokens=True (the post-processor's
    template). Decoding is tokenizers' decode with skip_special_tokens=False.
    """
    hf = tokenizers.Tokenizer.from_file(path)
    mine = kuiper_path or path
    for allow in [False, True]:
        hf.encode_special_tokens = not allow
        for bos in [False, True]:
            label = f"{name} bos={int(bos)} allow_special={int(allow)}"
            expected = [hf.encode(t, add_special_tokens=bos).ids for t in texts]
            if not report.check(label, texts, expected, tool.encode(mine, texts, bos, allow)):
                return
            want = [hf.decode(ids, skip_special_tokens=False).encode() for ids in expected]
            if not report.check(f"{label} decode", texts, want, tool.decode(mine, expected), "decoded bytes"):
                return
    # Every id decoded alone (first-token rules) and after an ordinary token. kuiper hands out
    # bytes (a character may span tokens); U+FFFD for what is not UTF-8 is the reader's, here
    # Python's, as it is Rust's from_utf8_lossy in tokenizers.
    hf.encode_special_tokens = True
    size = max(hf.get_vocab(with_added_tokens=True).values()) + 1
    step = max(1, size // 40000)
    lead = hf.encode("a", add_special_tokens=False).ids[-1:]
    for prefix in [[], lead]:
        sequences = [prefix + [i] for i in range(0, size, step)]
        want = [hf.decode(ids, skip_special_tokens=False) for ids in sequences]
        got = [b.decode("utf-8", "replace") for b in tool.decode(mine, sequences)]
        which = "every id" if step == 1 else f"every {step}th id"
        if not report.check(f"{name} decode of {which}{' after an ordinary token' if prefix else ''}",
                            sequences, want, got, "decoded text"):
            return
    for raw in INVALID_UTF8 if invalid_utf8 else []:
        try:
            hf.encode(raw.decode("utf-8", "surrogateescape"))
            report.check(f"{name} reference refuses invalid UTF-8", [repr(raw)], ["refused"], ["encoded"])
            return
        except Exception:
            pass
        refused, message = tool.refuses(mine, raw)
        if not refused or "UTF-8" not in message:
            report.check(f"{name} invalid UTF-8", [repr(raw)], ["refused: not valid UTF-8"], [message])
            return
    if invalid_utf8:
        report.lines.append(f"{name}: {len(INVALID_UTF8)} invalid UTF-8 inputs refused by both")


def check_same_ids(tool, report, name, path_a, path_b, texts):
    """Two tokenizer files of one model (tokenizer.model beside tokenizer.json) agree in kuiper."""
    for bos, allow in [(False, False), (True, False), (True, True)]:
        report.check(f"{name} bos={int(bos)} allow_special={int(allow)}", texts, tool.encode(path_a, texts, bos, allow),
                     tool.encode(path_b, texts, bos, allow))


def check_hf_families(tool, report, src, work, ranks, llama3_specials, texts):
    """Real tokenizer.json files committed under test/data/tokenizers, and files of each family's
    layout written from them and from the LLaMA 3 ranks (hf_tokenizer_files.py says which)."""
    real = {}
    for name in ["phi-3-mini", "phi-2"]:
        with gzip.open(os.path.join(src, f"test/data/tokenizers/{name}.tokenizer.json.gz"), "rb") as f:
            real[name] = json.loads(f.read())
        check_hf_file(tool, report, f"{name} (real tokenizer.json)", write_json(real[name], os.path.join(
            work, name, "tokenizer.json")), texts, invalid_utf8=True)
    files = {}
    for variant in ["tinyllama", "llama2-hf", "mistral-normalizer", "mistral-metaspace", "mistral-metaspace-decoder"]:
        files[variant] = hf_tokenizer_files.sentencepiece_style(real["phi-3-mini"], variant)
    vocab, merges = hf_tokenizer_files.byte_level_bpe(ranks)
    files["llama3"] = hf_tokenizer_files.llama3(vocab, merges, llama3_specials, merges_as_pairs=False)
    files["qwen2"] = hf_tokenizer_files.qwen(vocab, merges, qwen3=False)
    files["qwen3"] = hf_tokenizer_files.qwen(vocab, merges, qwen3=True)
    files["smollm2"] = hf_tokenizer_files.smollm2(vocab, merges)
    files["mistral-metaspace-split"] = copy.deepcopy(files["mistral-metaspace"])
    files["mistral-metaspace-split"]["pre_tokenizer"]["split"] = True
    # ByteLevel's add_prefix_space, on its own regex and after a Split (a space before each piece).
    files["phi-2-prefix-space"] = copy.deepcopy(real["phi-2"])
    files["phi-2-prefix-space"]["pre_tokenizer"]["add_prefix_space"] = True
    files["qwen2-prefix-space"] = copy.deepcopy(files["qwen2"])
    files["qwen2-prefix-space"]["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
    for variant in ["mixed-affixes", "mixed-behaviors", "mixed-never"]:
        files[variant] = hf_tokenizer_files.mixed(texts[:200], variant)
    paths = {}
    for variant, doc in files.items():
        paths[variant] = write_json(doc, os.path.join(work, f"hf-{variant}", "tokenizer.json"))
        check_hf_file(tool, report, f"{variant} (tokenizer.json of that layout)", paths[variant], texts)
    # TinyLlama and LLaMA-2-*-hf ship tokenizer.model beside tokenizer.json: both must give the
    # same ids (allow_special included: <s>, </s>, <unk> are special in both).
    check_same_ids(tool, report, "tokenizer.model vs TinyLlama-layout tokenizer.json",
                   os.path.join(src, "models/tokenizers/llama2/tokenizer.model"), paths["tinyllama"], texts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", required=True, help="the built kuiper_tokenize program")
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--work-dir", help="where to write generated tokenizer.json files (default: a temp dir)")
    parser.add_argument("--shared-dir",
                        help="extra tokenizers and text (llama2 tokenizer.bin, TinyStories); default "
                             "../shared/assets beside the repository, skipped when that is absent; "
                             "given explicitly, every file it should hold must be there")
    parser.add_argument("--hf-only", action="store_true",
                        help="only the tokenizer.json checks against the tokenizers library")
    parser.add_argument("--no-hf", action="store_true",
                        help="everything but the tokenizer.json checks against the tokenizers library")
    args = parser.parse_args()
    src = os.path.abspath(args.source_dir)
    asked_for_shared = args.shared_dir is not None
    if not asked_for_shared:
        args.shared_dir = os.path.join(src, "..", "shared", "assets")
    elif not os.path.isdir(args.shared_dir):
        sys.exit(f"--shared-dir {args.shared_dir} is not a directory")

    def shared_missing(path, what):
        """Whether an optional shared file is absent; absent when explicitly asked for is an error."""
        if os.path.exists(path):
            return False
        if asked_for_shared:
            sys.exit(f"--shared-dir {args.shared_dir} lacks {path} ({what})")
        report.lines.append(f"{path} not present, {what} skipped")
        return True
    corpus = load_corpus(os.path.join(src, "test/data/tokenizer_corpus.txt"))
    texts = corpus + long_cases()
    tool = Tool(args.tool)
    report = Report()

    llama3 = os.path.join(src, "models/tokenizers/llama3/tokenizer.model")
    ranks = load_tiktoken_bpe(llama3)
    specials = llama3_special_tokens()
    if args.hf_only:
        work = args.work_dir or tempfile.mkdtemp()
        check_hf_families(tool, report, src, work, ranks, specials, texts + HF_ONLY_CASES)
        print("\n".join(report.lines))
        return 1 if report.failed else 0
    encoding = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={s: len(ranks) + i for i, s in enumerate(specials)})
    check_tiktoken(tool, report, "llama3 (tiktoken)", llama3, encoding, texts, specials)

    with tempfile.TemporaryDirectory() as temp:
        work = args.work_dir or temp
        vocab, merges = hf_tokenizer_files.byte_level_bpe(ranks)
        for as_pairs in [False, True]:
            doc = hf_tokenizer_files.llama3(vocab, merges, specials, as_pairs)
            json_path = write_json(doc, os.path.join(work, f"llama3-hf-{'pairs' if as_pairs else 'strings'}",
                                                     "tokenizer.json"))
            label = f"llama3-hf (tokenizer.json, merges as {'pairs' if as_pairs else 'strings'})"
            check_tiktoken(tool, report, label, json_path, encoding, texts, specials)
        if not args.no_hf:
            check_hf_families(tool, report, src, work, ranks, specials, texts + HF_ONLY_CASES)

    for name, model in [("llama2 (sentencepiece)", "models/tokenizers/llama2/tokenizer.model"),
                        ("tok512 (sentencepiece)", "models/stories260K/tok512.model")]:
        path = os.path.join(src, model)
        check_sentencepiece(tool, report, name, path, sentencepiece.SentencePieceProcessor(model_file=path), texts)

    bins = [("tok512.bin (llama2.c)", os.path.join(src, "models/stories260K/tok512.bin"),
             os.path.join(src, "models/stories260K/tok512.model")),
            ("llama2 tokenizer.bin (llama2.c)", os.path.join(args.shared_dir, "llama2/tokenizer.bin"),
             os.path.join(src, "models/tokenizers/llama2/tokenizer.model"))]
    for name, bin_path, model in bins:
        if shared_missing(bin_path, name):
            continue
        check_llama2c(tool, report, name, bin_path, sentencepiece.SentencePieceProcessor(model_file=model), texts)

    # A large real text, when the shared assets are there: one 794 KB case per tokenizer.
    story_path = os.path.join(args.shared_dir, "text/tinystories_valid_head.txt")
    if not shared_missing(story_path, "the large-text check"):
        with open(story_path, encoding="utf-8") as f:
            story = [f.read()]
        report.check("llama3 (tiktoken) on tinystories_valid_head.txt", ["tinystories"],
                     [encoding.encode(story[0], disallowed_special=())], tool.encode(llama3, story, False, False))
        llama2 = os.path.join(src, "models/tokenizers/llama2/tokenizer.model")
        sp = sentencepiece.SentencePieceProcessor(model_file=llama2)
        report.check("llama2 (sentencepiece) on tinystories_valid_head.txt", ["tinystories"],
                     [sp.encode(story[0])], tool.encode(llama2, story, False, False))

    print("\n".join(report.lines))
    if report.failed:
        print("FAILED: kuiper differs from a reference (first difference shown above)")
        return 1
    print(f"OK: {len(corpus)} corpus cases + {len(texts) - len(corpus)} long cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
