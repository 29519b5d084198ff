#!/usr/bin/env python3
"""Hostile files and numbers given to the programs (issue #18): each case ends with one error
line naming the culprit and exit code 1 — never a hang, an abort (exit 134) or text quietly lost.
A FIFO stands for any file that is not regular: reading one would block forever.

Usage: hostile_inputs_test.py --bin-dir BUILD --cuda-built ON|OFF"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORIES = os.path.join(ROOT, "models/stories260K/stories260K.bin")
TOK512 = os.path.join(ROOT, "models/stories260K/tok512.model")
LLAMA3_TOKENIZER = os.path.join(ROOT, "models/tokenizers/llama3/tokenizer.model")
HF_SINGLE = os.path.join(ROOT, "test/data/hf/llama2_tiny")
HF_SHARDED = os.path.join(ROOT, "test/data/hf/llama2_tiny_sharded")
# stories260K (llama2.c v0): 7-int header, embedding [512, 64], 5 attention norms [64], then wq.
STORIES_WQ0_OFFSET = 28 + (512 * 64 + 5 * 64) * 4
STORIES_NORM0_OFFSET = 28 + 512 * 64 * 4


class Checks:
    def __init__(self, bin_dir):
        self.bin_dir = bin_dir
        self.failures = 0
        self.count = 0

    def tool(self, name):
        for sub in ("demo", "tools"):
            path = os.path.join(self.bin_dir, sub, name)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(name)

    def refused(self, name, program, args, phrases, stdin=b"", code=1):
        """`program` must exit with `code` (2: a bad flag) and exactly one stderr line containing
        every phrase."""
        self.count += 1
        try:
            r = subprocess.run([self.tool(program)] + args, input=stdin, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            return self.report(name, ["hung (no answer within 60 s)"], "")
        stderr = r.stderr.decode(errors="replace")
        lines = [l for l in stderr.splitlines() if l.strip()]
        problems = []
        if r.returncode != code:
            problems.append(f"exit code {r.returncode}, want {code} (134 = abort, negative = signal)")
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines, want 1")
        for phrase in phrases:
            if lines and phrase.lower() not in lines[0].lower():
                problems.append(f"message lacks {phrase!r}")
        self.report(name, problems, stderr)

    def expect(self, name, condition, detail):
        self.count += 1
        self.report(name, [] if condition else [detail], "")

    def report(self, name, problems, stderr):
        print(f"[{'ok' if not problems else 'FAIL'}] {name}: {stderr.strip()[:300]}")
        for p in problems:
            print(f"       {p}")
        self.failures += bool(problems)


def patched_copy(src, dst, offset, value):
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<f", value))


def tokenizer_json(path, vocab_id, added_id):
    """A BPE tokenizer.json with vocab a, b (b's id given) and one special added token <X>."""
    text = ('{"model": {"type": "BPE", "vocab": {"a": 0, "b": %s}, "merges": []}, '
            '"added_tokens": [{"id": %s, "content": "<X>", "special": true}]}' % (vocab_id, added_id))
    with open(path, "w") as f:
        f.write(text)


def file_cases(c, tmp):
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    loop = os.path.join(tmp, "loop")
    os.symlink("loop", loop)
    c.refused("FIFO as model", "llama_infer", ["-m", fifo, "-t", TOK512, "-n", "2"], [fifo, "FIFO"])
    c.refused("FIFO as tokenizer", "llama_infer", ["-t", fifo, "-n", "2"], [fifo, "FIFO"])
    c.refused("FIFO as input text", "kuiper_tokenize", ["-t", TOK512, "--input", fifo], [fifo, "FIFO"])
    c.refused("FIFO as text to score", "llama_perplexity", ["-f", fifo], [fifo, "FIFO"])
    c.refused("directory as input text", "kuiper_tokenize", ["-t", TOK512, "--input", tmp], [tmp, "directory"])
    c.refused("symlink loop as model", "llama_infer", ["-m", loop, "-n", "2"], [loop, "symbolic links"])
    c.refused("symlink loop as tokenizer", "llama_infer", ["-t", loop, "-n", "2"], [loop, "symbolic links"])
    c.refused("symlink loop above the model", "llama_infer", ["-m", os.path.join(loop, "model.bin"), "-n", "2"],
              ["symbolic links"])
    # An unsearchable directory above the model or tokenizer (root searches every directory).
    locked = os.path.join(tmp, "locked")
    os.makedirs(locked)
    shutil.copyfile(TOK512, os.path.join(locked, "tok512.model"))
    os.chmod(locked, 0)
    if os.geteuid() == 0:
        print("[skip] unsearchable directory: running as root")
    else:
        c.refused("unsearchable directory above the model", "llama_infer",
                  ["-m", os.path.join(locked, "model.bin"), "-n", "2"], ["permission denied"])
        c.refused("unsearchable directory above the tokenizer", "llama_infer",
                  ["-t", os.path.join(locked, "tok512.model"), "-n", "2"], ["permission denied"])
    os.chmod(locked, 0o700)
    # Hugging Face directories whose parts are FIFOs or loops.
    for name, source, part in [("FIFO as safetensors file", HF_SINGLE, "model.safetensors"),
                               ("FIFO as safetensors shard", HF_SHARDED, "model-00002-of-00003.safetensors"),
                               ("FIFO as shard index", HF_SHARDED, "model.safetensors.index.json"),
                               ("FIFO as config.json", HF_SINGLE, "config.json")]:
        model = os.path.join(tmp, name.replace(" ", "_"))
        shutil.copytree(source, model)
        os.remove(os.path.join(model, part))
        os.mkfifo(os.path.join(model, part))
        c.refused(name, "kuiper_export", [model, os.path.join(tmp, "out.kuiper")], [part, "FIFO"])
    model = os.path.join(tmp, "config_loop")
    shutil.copytree(HF_SINGLE, model)
    os.remove(os.path.join(model, "config.json"))
    os.symlink("config.json", os.path.join(model, "config.json"))
    c.refused("symlink loop as config.json", "kuiper_export", [model, os.path.join(tmp, "out.kuiper")],
              ["config.json", "symbolic links"])


def number_cases(c, tmp):
    nan_matrix = os.path.join(tmp, "nan_wq.bin")
    patched_copy(STORIES, nan_matrix, STORIES_WQ0_OFFSET + 4 * 3, float("nan"))
    inf_norm = os.path.join(tmp, "inf_norm.bin")
    patched_copy(STORIES, inf_norm, STORIES_NORM0_OFFSET, float("inf"))
    c.refused("--check-tensors: NaN in a matrix", "llama_infer", ["-m", nan_matrix, "-t", TOK512, "--check-tensors"],
              [nan_matrix, "layers.0.wq", "NaN", "element 3"])
    c.refused("--check-tensors: Inf in a norm", "llama_infer", ["-m", inf_norm, "-t", TOK512, "--check-tensors"],
              ["layers.0.attention_norm", "+Inf"])
    c.refused("--check-tensors in kuiper_export", "kuiper_export",
              [nan_matrix, os.path.join(tmp, "out.kuiper"), "--check-tensors"], ["layers.0.wq", "NaN"])
    c.refused("NaN weight quantized at load", "llama_infer", ["-m", nan_matrix, "-t", TOK512, "--dtype", "int8"],
              ["layers.0.wq", "NaN"])
    c.refused("NaN weight exported as int8", "kuiper_export", [nan_matrix, os.path.join(tmp, "out.kuiper")],
              ["layers.0.wq", "NaN"])
    c.refused("NaN weight exported as int4 (calibration runs the model)", "kuiper_export",
              [nan_matrix, os.path.join(tmp, "out.kuiper"), "--quant", "int4", "--gptq"], ["layers.0.wq", "NaN"])
    c.refused("--calibration without --quant int4", "kuiper_export",
              [STORIES, os.path.join(tmp, "out.kuiper"), "--calibration", TOK512], ["--quant int4"])
    missing_text = os.path.join(tmp, "no_such_text.txt")
    c.refused("missing calibration text", "kuiper_export",
              [STORIES, os.path.join(tmp, "out.kuiper"), "--quant", "int4", "--calibration", missing_text], [missing_text])
    # Without the check a NaN model runs to the sampler, which refuses NaN logits.
    c.refused("NaN logits reach the sampler", "llama_infer", ["-m", nan_matrix, "-t", TOK512, "-n", "4"], ["NaN"])
    c.refused("--max-reply 0", "llama_chat", ["--max-reply", "0"], ["--max-reply", "16777216"], code=2)


def tokenizer_json_cases(c, tmp):
    # Each id as written in the file, and as the message spells it.
    for bad, spelled in [("2147483647", "2147483647"), ("2e9", "2000000000"), ("1e300", "1e+300"), ("-1", "-1"),
                         ("-2147483648", "-2147483648"), ("1.5", "1.5"), ("\"3\"", "\"3\"")]:
        path = os.path.join(tmp, "tokenizer.json")
        tokenizer_json(path, 1, bad)
        c.refused(f"tokenizer.json: added token id {bad}", "kuiper_tokenize", ["-t", path, "--allow-special"],
                  ["tokenizer.json", "added token", spelled], stdin=b"a<X>b")
        tokenizer_json(path, bad, 2)
        c.refused(f"tokenizer.json: vocab id {bad}", "kuiper_tokenize", ["-t", path],
                  ["tokenizer.json", "vocab", spelled], stdin=b"ab")


def fuzz_finding_cases(c):
    # Inputs the fuzz harnesses found (test/fuzz/corpus), through the programs.
    corpus = os.path.join(ROOT, "test/fuzz/corpus")
    empty_piece = os.path.join(corpus, "fuzz_tokenizer_file_sentencepiece/empty-piece-darts-exception")
    c.refused("SentencePiece model with an empty piece (libsentencepiece throws)", "kuiper_tokenize",
              ["-t", empty_piece], [empty_piece, "not a valid SentencePiece model"], stdin=b"hello")


def export_cases(c, tmp):
    model = os.path.join(tmp, "same", "model.bin")
    os.makedirs(os.path.dirname(model))
    shutil.copyfile(STORIES, model)
    os.symlink("model.bin", os.path.join(tmp, "same", "link.bin"))
    os.makedirs(os.path.join(tmp, "same", "sub"))
    size = os.path.getsize(model)
    for name, out in [("through ..", os.path.join(tmp, "same", "sub", "..", "model.bin")),
                      ("through a symlink", os.path.join(tmp, "same", "link.bin"))]:
        c.refused(f"kuiper_export: IN is OUT {name}", "kuiper_export", [model, out], ["same file"])
    c.expect("kuiper_export: the input survives", os.path.getsize(model) == size, "the input file was overwritten")


def chat_cases(c, tmp, cuda_built):
    if cuda_built and os.path.exists("/dev/nvidiactl"):
        print("[skip] --device cuda without a GPU: this machine has one")
    else:
        c.refused("--device cuda without a GPU", "llama_infer", ["--device", "cuda", "-n", "2"],
                  ["no CUDA device found" if cuda_built else "no CUDA support"])
    # A random model of the LLaMA 3 vocabulary, so that the chat uses the tiktoken tokenizer.
    model = os.path.join(tmp, "llama3_vocab.bin")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make_random_llama2c.py"), "--shape",
                    "16,32,1,2,1,128256", "--seq-len", "256", model], check=True)
    r = subprocess.run([c.tool("llama_chat"), "-m", model, "-t", LLAMA3_TOKENIZER, "--template", "llama3",
                        "--temp", "0", "--max-reply", "4"],
                       input=b"hello\nbad \xff\xfe bytes\nagain\n", capture_output=True, timeout=300)
    stderr = r.stderr.decode(errors="replace")
    refusals = [l for l in stderr.splitlines() if "turn refused" in l]
    c.expect("chat: invalid UTF-8 refuses one turn, the session goes on",
             r.returncode == 0 and len(refusals) == 1 and "UTF-8" in refusals[0] and stderr.count("context:") == 2,
             f"exit {r.returncode}, stderr {stderr!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--cuda-built", required=True, choices=["ON", "OFF"])
    args = parser.parse_args()
    c = Checks(args.bin_dir)
    tmp = tempfile.mkdtemp()
    try:
        file_cases(c, tmp)
        number_cases(c, tmp)
        tokenizer_json_cases(c, tmp)
        fuzz_finding_cases(c)
        export_cases(c, tmp)
        chat_cases(c, tmp, args.cuda_built == "ON")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{c.count - c.failures} passed, {c.failures} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
