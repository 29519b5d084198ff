#!/usr/bin/env python3
"""Bad input to llama_infer (and llama_bench, when given) ends with one clear line on stderr and
a non-zero exit code — never a crash, a hang or garbage.
Usage: cli_errors_test.py PATH/TO/llama_infer [PATH/TO/llama_bench]"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORIES = os.path.join(ROOT, "models/stories260K/stories260K.bin")
TOK512 = os.path.join(ROOT, "models/stories260K/tok512.model")
LLAMA2_TOKENIZER = os.path.join(ROOT, "models/tokenizers/llama2/tokenizer.model")


def run(tool, args, timeout=60):
    return subprocess.run([tool] + args, capture_output=True, text=True, timeout=timeout)


def main():
    tool = sys.argv[1]
    tmp = tempfile.mkdtemp()
    with open(STORIES, "rb") as f:
        good = f.read()
    truncated = os.path.join(tmp, "truncated.bin")
    with open(truncated, "wb") as f:
        f.write(good[: len(good) // 2])
    garbage_tok = os.path.join(tmp, "garbage.model")
    with open(garbage_tok, "wb") as f:
        f.write(b"\x00\x01not a tokenizer at all\xff" * 10)

    # (description, arguments, a phrase the error must contain)
    cases = [
        ("missing model", ["-m", os.path.join(tmp, "nope.bin")], "no such file"),
        ("truncated model", ["-m", truncated, "-t", TOK512], "truncated.bin"),
        ("tokenizer given as model", ["-m", TOK512, "-t", TOK512], "not a checkpoint"),
        ("model dir without files", ["-m", tmp, "-t", TOK512], tmp),
        ("missing tokenizer", ["-t", os.path.join(tmp, "nope.model")], "nope.model"),
        ("garbage tokenizer", ["-t", garbage_tok], "garbage.model"),
        ("prompt longer than context", ["-c", "8", "-p", "Once upon a time " * 10], "context"),
        ("unknown flag", ["--bogus"], "bogus"),
        ("bad number", ["-n", "abc"], "abc"),
        ("negative temperature", ["--temp", "-1"], "temp"),
        ("NaN temperature", ["--temp", "nan"], "temp"),
        ("infinite temperature", ["--temp", "inf"], "temp"),
        ("negative seed", ["--seed", "-1"], "--seed"),
        ("seed of 2^64", ["--seed", "18446744073709551616"], "0..18446744073709551615"),
        ("seed with junk", ["--seed", "12x"], "--seed"),
        # "\udcff" is the byte 0xff on the command line (Python's surrogateescape).
        ("prompt not UTF-8", ["-p", "Once upon a \udcff time"], "not valid UTF-8"),
        ("prompt with a cut character", ["-p", "caf\udcc3"], "not valid UTF-8"),
        ("top-p zero", ["--top-p", "0"], "top"),
        ("unknown device", ["--device", "tpu"], "device"),
        ("context beyond the model", ["-c", "100000"], "100000"),
        ("forced wrong format", ["--format", "llama2c-v1"], "magic"),
    ]
    if os.path.exists(LLAMA2_TOKENIZER):
        cases.append(("tokenizer of another model", ["-t", LLAMA2_TOKENIZER], "32000"))
    runs = [(tool, args + ["-n", "4"] if "-n" not in args else args, name, phrase)
            for name, args, phrase in cases]
    if len(sys.argv) > 2:
        bench = sys.argv[2]
        for name, args, phrase in [
            ("bench: empty --contexts", ["--contexts", ""], "contexts"),
            ("bench: --contexts with junk", ["--contexts", "128,12x"], "12x"),
            ("bench: negative context", ["--contexts", "-5"], "-5"),
            ("bench: --shape with junk", ["--shape", "64,x,2,4,4,100"], "shape"),
        ]:
            runs.append((bench, args, name, phrase))

    failures = 0
    for program, args, name, phrase in runs:
        r = run(program, args)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        problems = []
        if r.returncode <= 0:
            problems.append(f"exit code {r.returncode} (want > 0; negative means killed by a signal)")
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines, want 1: {r.stderr!r}")
        elif phrase.lower() not in lines[0].lower():
            problems.append(f"message lacks {phrase!r}: {lines[0]!r}")
        status = "ok" if not problems else "FAIL"
        print(f"[{status}] {name}: {lines[0] if lines else r.stderr!r}")
        for p in problems:
            print(f"       {p}")
        failures += bool(problems)

    # And the happy path still works with no arguments at all.
    r = run(tool, ["-n", "16", "--seed", "1"])
    if r.returncode != 0 or len(r.stdout.strip()) < 20:
        print(f"[FAIL] default story: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")
        failures += 1
    else:
        print("[ok] default story runs")
    # The ends of the seed's range are seeds.
    for seed in ("0", "18446744073709551615"):
        r = run(tool, ["-n", "4", "--seed", seed])
        if r.returncode != 0:
            print(f"[FAIL] --seed {seed}: exit {r.returncode}, stderr {r.stderr!r}")
            failures += 1
    print(f"{len(runs) + 3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
