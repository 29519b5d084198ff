#!/usr/bin/env python3
"""kuiper against llama.cpp itself on GGUF files kuiper_export writes (not a ctest: CI has no
llama.cpp). For each model it checks that llama.cpp loads the kuiper-written file, that both
tokenize a text to the same ids, and that perplexity agrees when both are computed llama.cpp's
way (llama-perplexity: chunks of -c tokens, the first token of each chunk replaced by BOS, only
the second half of each chunk scored). kuiper's side of the perplexity comes from its logits
(test/checkpoint_probe) run through the same arithmetic here.

Models: stories260K (tok512, llama) in F32 and F16; a random-weight llama of row-aligned shape
in Q8_0 (stories260K's 172-wide rows are not whole Q8_0 blocks); a random-weight llama whose
rows are whole K-quant super-blocks (256/512) quantized by llama.cpp's own llama-quantize to
Q4_0, Q4_1 and Q4_K_M, and stories260K quantized so to Q4_0 (kuiper reads files it did not
write); the qwen2/qwen3/llama3 HF
fixtures (random weights) in F32 with small byte-level tokenizers trained here (pre qwen2 and
llama-bpe), which also exercises llama.cpp's q/k layout of each architecture.

    compare_llamacpp.py --llama-bin /tmp/llama.cpp/build/bin [--build build] [--only NAME]
                        [--text ../shared/assets/text/tinystories_valid_head.txt]

llama.cpp built from its public source outside the repository, e.g. with cmake
-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF (on a CPU with AMX under a kernel that does not
grant it, add -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 to the C/C++ flags: its Q8_0 path
otherwise dies of an illegal instruction).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test"))
import gguf_reference  # noqa: E402

# llama.cpp multiplies quantized weights by activations it quantizes to 8 bits (Q8_0, Q8_K);
# kuiper's perplexity here comes from prefill, which multiplies dequantized weights in fp32.
TOLERANCE = {"F32": 1e-3, "F16": 1e-3, "Q8_0": 1e-2, "Q4_0": 2e-2, "Q4_1": 2e-2, "Q4_K_M": 2e-2}


def run(args, **kw):
    result = subprocess.run(args, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} ... failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def llamacpp_ids(bin_dir, model, text_path):
    out = run([os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-f", text_path, "--ids", "--log-disable",
               "--no-bos"])
    return json.loads(out.strip().splitlines()[-1])


def kuiper_ids(build, model, text):
    tool = gguf_reference.tokenizer_reference.Tool(os.path.join(build, "demo/kuiper_tokenize"))
    return tool.encode(model, [text], False, False)[0]


def llamacpp_perplexity(bin_dir, model, text_path, n_ctx):
    out = subprocess.run([os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", text_path, "-c", str(n_ctx),
                          "-b", str(n_ctx), "-t", "2"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"llama-perplexity exited with {out.returncode}: {(out.stdout + out.stderr)[-500:]}")
    match = re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr)
    if not match:
        raise RuntimeError(f"llama-perplexity gave no estimate: {(out.stdout + out.stderr)[-2000:]}")
    return float(match.group(1))


def kuiper_perplexity(build, model, ids, bos, n_ctx):
    """llama-perplexity's arithmetic over kuiper's logits. Where the vocabulary adds BOS
    (`bos` not None), the text starts with it and so does every chunk."""
    probe = os.path.join(build, "test/checkpoint_probe")
    tokens = ([bos] if bos is not None else []) + ids
    first, nll, count = n_ctx // 2, 0.0, 0
    for start in range(0, len(tokens) // n_ctx * n_ctx, n_ctx):
        chunk = tokens[start:start + n_ctx]
        if bos is not None:
            chunk[0] = bos
        logits = np.array(gguf_reference.probe(probe, model, tokens=chunk)["logits"], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            m = row.max()
            nll += math.log(np.exp(row - m).sum()) + m - row[tokens[start + j + 1]]
            count += 1
    return math.exp(nll / count)


def export(build, source, out, *flags):
    run([os.path.join(build, "tools/kuiper_export"), source, out, "--out-format", "gguf", *flags])
    return out


def compare(args, name, kind, model, text, text_path):
    reader = gguf_reference.gguf.GGUFReader(model)
    add_bos = gguf_reference.gguf_field(reader, "tokenizer.ggml.add_bos_token")
    if add_bos is None:  # llama.cpp's default: SentencePiece vocabularies add BOS
        add_bos = gguf_reference.gguf_field(reader, "tokenizer.ggml.model") == "llama"
    bos = int(gguf_reference.gguf_field(reader, "tokenizer.ggml.bos_token_id")) if add_bos else None
    theirs = llamacpp_ids(args.llama_bin, model, text_path)
    ours = kuiper_ids(args.build, model, text)
    same = theirs == ours
    print(f"{name}: token ids {'identical' if same else 'DIFFER'} ({len(ours)} kuiper, {len(theirs)} llama.cpp)")
    ppl_theirs = llamacpp_perplexity(args.llama_bin, model, text_path, args.n_ctx)
    ppl_ours = kuiper_perplexity(args.build, model, theirs, bos, args.n_ctx)
    rel = abs(ppl_ours - ppl_theirs) / ppl_theirs
    ok = rel <= TOLERANCE[kind]
    print(f"{name}: perplexity (c={args.n_ctx}) llama.cpp {ppl_theirs:.4f}, kuiper {ppl_ours:.4f}, "
          f"relative difference {rel:.2e} ({'ok' if ok else 'FAIL'}, bound {TOLERANCE[kind]:.0e})", flush=True)
    return same and ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", required=True,
                        help="directory with llama-tokenize, llama-perplexity and llama-quantize")
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--text", default=os.path.join(HERE, "..", "..", "shared/assets/text/tinystories_valid_head.txt"))
    parser.add_argument("--bytes", type=int, default=64 * 1024, help="how much of the text (default 64 KB)")
    parser.add_argument("--n-ctx", type=int, default=128)
    parser.add_argument("--work-dir")
    parser.add_argument("--only", help="compare only the models whose name contains this")
    args = parser.parse_args()
    src = os.path.abspath(os.path.join(HERE, ".."))
    work = args.work_dir or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    with open(args.text, "rb") as f:
        text = f.read(args.bytes).decode("utf-8", "ignore")
    text_path = os.path.join(work, "text.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)

    models = []
    stories = os.path.join(src, "models/stories260K/stories260K.bin")
    models.append(("stories260K F32", "F32", export(args.build, stories, os.path.join(work, "stories-f32.gguf"), "--quant", "none")))
    models.append(("stories260K F16", "F16", export(args.build, stories, os.path.join(work, "stories-f16.gguf"), "--quant", "none",
                                                    "--dtype", "fp16")))
    random_bin = os.path.join(work, "random-aligned.bin")
    run([sys.executable, os.path.join(HERE, "make_random_llama2c.py"), "--shape", "128,256,3,4,2,512", "--seq-len", "512", random_bin])
    models.append(("random llama 128/256 Q8_0", "Q8_0", export(args.build, random_bin, os.path.join(work, "random-q8_0.gguf"),
                                                               "--tokenizer", os.path.join(src, "models/stories260K/tok512.model"))))
    stories_q4 = os.path.join(work, "stories-Q4_0.gguf")  # w2's 172-wide rows stay F16, the classifier Q8_0
    run([os.path.join(args.llama_bin, "llama-quantize"), models[0][2], stories_q4, "Q4_0"])
    models.append(("stories260K Q4_0 (llama-quantize)", "Q4_0", stories_q4))
    random_k = os.path.join(work, "random-256.bin")
    run([sys.executable, os.path.join(HERE, "make_random_llama2c.py"), "--shape", "256,512,3,4,2,512", "--seq-len", "512", random_k])
    random_f32 = export(args.build, random_k, os.path.join(work, "random-256-f32.gguf"), "--quant", "none",
                        "--tokenizer", os.path.join(src, "models/stories260K/tok512.model"))
    for kind in ("Q4_0", "Q4_1", "Q4_K_M"):
        quantized = os.path.join(work, f"random-256-{kind}.gguf")
        run([os.path.join(args.llama_bin, "llama-quantize"), random_f32, quantized, kind])
        models.append((f"random llama 256/512 {kind} (llama-quantize)", kind, quantized))
    corpus = gguf_reference.tokenizer_reference.load_corpus(os.path.join(src, "test/data/tokenizer_corpus.txt"))
    training = corpus + text.split("\n")[:2000]
    for fixture, layout, vocab in [("qwen2_tiny", "qwen2", 280), ("qwen3_tiny", "qwen2", 290), ("llama3_tiny", "llama3", 290)]:
        tokenizer = gguf_reference.train_byte_level_tokenizer(training, layout, vocab, os.path.join(work, f"tok-{fixture}", "tokenizer.json"))
        models.append((f"{fixture} F32 (pre {'llama-bpe' if layout == 'llama3' else layout})", "F32",
                       export(args.build, os.path.join(src, "test/data/hf", fixture), os.path.join(work, f"{fixture}.gguf"),
                              "--quant", "none", "--tokenizer", tokenizer)))

    failed = 0
    for name, kind, model in models:
        if args.only and args.only not in name:
            continue
        try:
            failed += not compare(args, name, kind, model, text, text_path)
        except RuntimeError as error:  # llama.cpp refusing or crashing on the file is a failure too
            print(f"{name}: FAIL: {error}")
            failed += 1
    print("FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
