#!/usr/bin/env python3
"""llama_perplexity --decode (each window one token at a time, through the decode step) gives the
figure the windowed prefill gives: the same windows score the same tokens, so the two may differ
only by fp32 rounding (bound 1e-4 relative on the mean NLL). stories260K in fp32 and int8,
windows of 64 tokens so the text spans several.
Usage: perplexity_decode_test.py PATH/TO/llama_perplexity"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORIES = os.path.join(ROOT, "models/stories260K/stories260K.bin")
TOK512 = os.path.join(ROOT, "models/stories260K/tok512.model")
TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        "One day, she saw a big red ball under a tree. She ran to the ball and kicked it high. "
        "The ball flew over the fence and landed in the pond. Lily was sad, but her friend Tom came "
        "to help. He used a long stick to get the ball out of the water. Lily smiled and said thank "
        "you. They played with the ball together until the sun went down.\n")


def mean_nll(tool, text_path, extra):
    out = subprocess.run([tool, "-m", STORIES, "-t", TOK512, "-f", text_path, "-c", "64"] + extra,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(extra)}: exit {out.returncode}: {out.stderr.strip()}")
    found = re.search(r"mean NLL ([0-9.]+) nats/token", out.stdout)
    scored = re.search(r"([0-9]+) tokens scored", out.stdout)
    if not found or not scored:
        sys.exit(f"FAIL: {' '.join(extra)}: no figure in {out.stdout!r}")
    return float(found.group(1)), int(scored.group(1))


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "story.txt")
        with open(text_path, "w") as f:
            f.write(TEXT * 2)
        failures = 0
        for dtype in ("fp32", "int8"):
            windows, n = mean_nll(tool, text_path, ["--dtype", dtype])
            decode, m = mean_nll(tool, text_path, ["--dtype", dtype, "--decode"])
            ok = n == m and n > 64 and abs(decode - windows) <= 1e-4 * windows
            print(f"{dtype}: {n} / {m} tokens, mean NLL windows {windows:.6f}, decode {decode:.6f}: {'ok' if ok else 'FAIL'}")
            failures += not ok
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
