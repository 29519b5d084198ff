#!/usr/bin/env python3
"""llama_perplexity against an independent reference: the float64 NumPy forward pass of
scripts/reference_forward.py over the same windows, on token ids from the `tokenizers` library.

The models are the tiny random-weight HF fixtures of test/data/hf; each gets a tokenizer.json of
its family's layout (hf_tokenizer_files.py) with a vocabulary of the fixture's size: the 256
byte-level tokens, pairs of bytes frequent in the text, then the family's special tokens.
  qwen2_tiny, qwen3_tiny  Qwen's layout, no BOS: each window starts with the text token before
                          its scored tokens; the text's first token is never scored
  llama3_tiny             LLaMA 3's layout, with <|begin_of_text|>: each window starts with BOS
                          and every text token is scored
The windows are written here from llama_perplexity's --help, not from its code. The bound is
1e-6 relative on the perplexity: fp32 against float64 differs by at most 2e-7 here, and these
perplexities are in the hundreds and more, so the four decimals printed resolve well under that.
Usage: perplexity_reference.py --tool PATH/TO/llama_perplexity --work-dir DIR
"""
import argparse
import collections
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import hf_tokenizer_files  # noqa: E402
import reference_forward  # noqa: E402

TEXT = os.path.join(ROOT, "test/data/tinystories_valid_slice.txt")
TEXT_BYTES = 900  # a few hundred tokens: several windows of WINDOW
WINDOW = 64
BOUND = 1e-6
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def byte_pairs(text, count):
    """The `count` most frequent adjacent byte pairs of `text`, as tiktoken-style ranks after
    the 256 single bytes (ties broken by the pair's bytes, so the file is reproducible)."""
    data = text.encode()
    pairs = collections.Counter(data[i:i + 2] for i in range(len(data) - 1))
    ranks = {bytes([b]): b for b in range(256)}
    for pair, _ in sorted(pairs.items(), key=lambda item: (-item[1], item[0]))[:count]:
        ranks[pair] = len(ranks)
    return ranks


def tokenizer_document(family, vocab_size, text):
    specials = {"qwen2": len(hf_tokenizer_files.QWEN2_SPECIALS),
                "qwen3": len(hf_tokenizer_files.QWEN2_SPECIALS) + len(hf_tokenizer_files.QWEN3_EXTRA),
                "llama3": len(LLAMA3_SPECIALS)}[family]
    vocab, merges = hf_tokenizer_files.byte_level_bpe(byte_pairs(text, vocab_size - 256 - specials))
    if family == "llama3":
        return hf_tokenizer_files.llama3(vocab, merges, LLAMA3_SPECIALS, merges_as_pairs=False)
    return hf_tokenizer_files.qwen(vocab, merges, qwen3=family == "qwen3")


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def reference_perplexity(model, ids, bos):
    """Windows of WINDOW tokens: a lead token (BOS, or without one the text token before the
    window's first scored token), then the scored tokens; each scored given those before it."""
    total, scored = 0.0, 0
    begin = 0 if bos is not None else 1
    while begin < len(ids):
        end = min(len(ids), begin + WINDOW - 1)
        window = [bos if bos is not None else ids[begin - 1]] + ids[begin:end]
        logp = log_softmax(model.logits(window))
        for i in range(len(window) - 1):
            total -= logp[i, window[i + 1]]
            scored += 1
        begin = end
    return math.exp(total / scored), scored


def kuiper_perplexity(tool, model_dir, tokenizer_path, text_path, extra):
    out = subprocess.run([tool, "-m", model_dir, "-t", tokenizer_path, "-f", text_path, "-c", str(WINDOW)] + extra,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return None, None, f"exit {out.returncode}: {out.stderr.strip()}"
    perplexity = re.search(r"perplexity ([0-9.]+)", out.stdout)
    scored = re.search(r"([0-9]+) tokens scored", out.stdout)
    if not perplexity or not scored:
        return None, None, f"no figure in {out.stdout!r}"
    return float(perplexity.group(1)), int(scored.group(1)), out.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()[:TEXT_BYTES]
    text_path = os.path.join(args.work_dir, "text.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)

    failures = 0
    for fixture, family in (("qwen2_tiny", "qwen2"), ("qwen3_tiny", "qwen3"), ("llama3_tiny", "llama3")):
        model_dir = os.path.join(ROOT, "test/data/hf", fixture)
        with open(os.path.join(model_dir, "config.json")) as f:
            vocab_size = json.load(f)["vocab_size"]
        tokenizer_path = os.path.join(args.work_dir, fixture + ".tokenizer.json")
        with open(tokenizer_path, "w", encoding="utf-8") as f:
            json.dump(tokenizer_document(family, vocab_size, text), f, ensure_ascii=False)
        tokenizer = Tokenizer.from_file(tokenizer_path)
        assert tokenizer.get_vocab_size(with_added_tokens=True) == vocab_size
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        bos = tokenizer.token_to_id("<|begin_of_text|>") if family == "llama3" else None
        expected, expected_scored = reference_perplexity(reference_forward.Model(model_dir), ids, bos)
        assert expected_scored == (len(ids) if bos is not None else len(ids) - 1)
        for extra in ([], ["--decode"]):
            got, scored, detail = kuiper_perplexity(args.tool, model_dir, tokenizer_path, text_path, extra)
            label = f"{fixture} ({'BOS' if bos is not None else 'no BOS'}{', --decode' if extra else ''})"
            if got is None:
                print(f"FAIL {label}: {detail}")
                failures += 1
                continue
            error = abs(got - expected) / expected
            ok = scored == expected_scored and error <= BOUND
            print(f"{label}: {scored} of {len(ids)} tokens scored (reference {expected_scored}), perplexity "
                  f"{got:.4f}, reference {expected:.6f}, relative error {error:.1e}: {'ok' if ok else 'FAIL'}")
            failures += not ok
    print("FAILED" if failures else "OK")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
