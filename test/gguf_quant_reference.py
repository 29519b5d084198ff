#!/usr/bin/env python3
"""Checks kuiper's reading of GGUF's 4-bit and 6-bit types (Q4_0, Q4_1, Q4_K, Q6_K) against the
`gguf` package (pip: gguf), llama.cpp's own. Files are written at run time: Q4_0/Q4_1 by gguf's
quantizer, Q4_K/Q6_K by test/ggml_kquants.py (gguf has no quantizer for them); every expected
value is gguf.quants.dequantize of the file's bytes.

  fixtures   the HF fixtures (test/data/hf) as Q4_0 and Q4_1 (F16 where rows are not whole
             blocks): every tensor kuiper loads equals gguf's dequantization exactly; Q4_0 becomes
             int4 symmetric, Q4_1 int4 with a minimum, groups of 32; prefill and decode logits
             against an F32 GGUF of gguf's dequantization, and against the fp32 HF model
  q4_k_m     a random tiny llama (dims multiples of 256) laid out as llama.cpp's Q4_K_M: Q4_K
             matrices, Q6_K output.weight and, in the layers use_more_bits picks, Q6_K attn_v and
             ffn_down; tensors exact (Q4_K: int4 with minimum, groups of 32; Q6_K: int8, groups
             of 16), prefill and decode logits against an F32 GGUF of gguf's dequantization, and
             llama_infer generates from the file alone
  blocks     random bytes in every field of every block (all scale and quant bit patterns): exact
  damaged    NaN/infinite block scales, rows that are not whole blocks, a truncated tensor: one
             line on stderr naming the file, non-zero exit

Usage: gguf_quant_reference.py --probe build/test/checkpoint_probe --infer build/demo/llama_infer
                               [--source-dir .] [--work-dir D]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import gguf
import sentencepiece
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggml_kquants  # noqa: E402
from gguf_reference import (MODELS, TOKENS, Failures, check_tensors, expect_one_line, kuiper_names,  # noqa: E402
                            parse_with_dirs, probe, relative, sentencepiece_writer, write_model)

# What each type becomes in kuiper (probe's "quantized" entry).
KUIPER_TYPE = {Q.Q4_0: {"dtype": "int4", "group_size": 32, "mins": False},
               Q.Q4_1: {"dtype": "int4", "group_size": 32, "mins": True},
               Q.Q4_K: {"dtype": "int4", "group_size": 32, "mins": True},
               Q.Q6_K: {"dtype": "int8", "group_size": 16, "mins": False}}
# Logits of the fixtures' Q4_0/Q4_1 files against the fp32 HF model, max |diff| / max |ref|:
# 4-bit weights move the logits of these random-weight fixtures a lot (measured 0.23-0.35).
FIXTURE_BOUND = 0.5
# Against an F32 file of the same (dequantized) weights; the tensors themselves are checked
# exactly. Prefill and decode quantize the int4 matmuls' inputs to int8 in blocks of 32 (measured
# 1.0e-2 to 2.9e-2 for both).
LOGIT_BOUND = 5e-2
LONG_TOKENS = [1, 7, 42, 100, 3, 250, 17, 64, 5, 199, 311, 2, 480, 77, 9, 150]


def matrix_names(reader):
    return [t.name for t in reader.tensors if len(t.shape) == 2]


def check_kuiper_types(fail, tool, path, label, cfg, arch):
    """Each quantized matrix became the kuiper type of its GGUF type."""
    reader = gguf.GGUFReader(path)
    names = {kuiper_names(cfg, arch, t.name)[0]: t.tensor_type for t in reader.tensors
             if len(t.shape) == 2 and t.tensor_type in KUIPER_TYPE}
    got = probe(tool, path, tensors=list(names), tokens=[])["quantized"]
    bad = [n for n, qtype in names.items() if got.get(n) != KUIPER_TYPE[qtype]]
    fail.check(not bad, f"{label}: {len(names)} quantized matrices in kuiper's matching types" +
               (f"; wrong: {[(n, got.get(n)) for n in bad]}" if bad else ""))


def dequantized_f32(hf_dir, arch, path, out):
    """An F32 GGUF of gguf's dequantization of every tensor in `path`."""
    reader = gguf.GGUFReader(path)
    plain = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
        list(reversed([int(d) for d in t.shape]))) for t in reader.tensors}
    return write_model(hf_dir, arch, Q.F32, out, plain)


def check_against_dequantized(fail, tool, hf_dir, arch, path, label, work, tokens=TOKENS):
    f32 = dequantized_f32(hf_dir, arch, path, os.path.join(work, os.path.basename(path)[:-5] + "-dequantized.gguf"))
    bound = LOGIT_BOUND
    for decode in (False, True):
        extra = ["--decode"] if decode else []
        got = probe_logits(tool, path, tokens, extra)
        ref = probe_logits(tool, f32, tokens, extra)
        error = relative(got, ref)
        fail.check(error <= bound, f"{label}: {'decode' if decode else 'prefill'} logits vs gguf's dequantization as "
                   f"F32: max rel error {error:.2e} (bound {bound:.0e})")


def probe_logits(tool, model, tokens, extra=()):
    args = [tool, model, "--tokens", ",".join(map(str, tokens)), *extra]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"checkpoint_probe {model} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)["logits"]


def check_fixtures(fail, tool, src, work):
    for fixture, arch in MODELS:
        hf_dir = os.path.join(src, "test/data/hf", fixture)
        cfg = json.load(open(os.path.join(hf_dir, "config.json")))
        reference = np.array(probe(tool, hf_dir)["logits"])
        for qtype in (Q.Q4_0, Q.Q4_1):
            path = write_model(hf_dir, arch, qtype, os.path.join(work, f"{fixture}-{qtype.name}.gguf"))
            label = f"{fixture} ({arch}, {qtype.name})"
            check_tensors(fail, tool, path, cfg, arch, label)
            check_kuiper_types(fail, tool, path, label, cfg, arch)
            error = relative(probe(tool, path)["logits"], reference)
            fail.check(error <= FIXTURE_BOUND, f"{label}: logits vs the HF safetensors model: max rel error {error:.2e} "
                       f"(bound {FIXTURE_BOUND})")
            # Where rows are not whole blocks the converter keeps F16 matrices; on the CPU they
            # run as F16 beside the int4 ones, so every file is exactly its weights.
            fallback = [t.name for t in gguf.GGUFReader(path).tensors if len(t.shape) == 2 and t.tensor_type != qtype]
            check_against_dequantized(fail, tool, hf_dir, arch, path,
                                      label + (f" with {len(fallback)} F16 matrices" if fallback else ""), work)


# ---- a tiny llama in llama.cpp's Q4_K_M layout ----

TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2}
TINY_CFG = {"num_attention_heads": TINY["num_attention_heads"], "num_key_value_heads": TINY["num_key_value_heads"]}


def use_more_bits(layer, layers):
    """llama.cpp's choice of the layers whose attn_v and ffn_down get Q6_K in Q4_K_M."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def q4_k_m_type(name):
    layers = TINY["num_hidden_layers"]
    if name == "output.weight":
        return Q.Q6_K
    parts = name.split(".")
    if parts[0] == "blk" and parts[2] in ("attn_v", "ffn_down") and use_more_bits(int(parts[1]), layers):
        return Q.Q6_K
    return Q.Q4_K


def tiny_tensors(rng, config=TINY):
    """Random weights of `config`'s shapes, GGUF names, llama layout (no permutation needed: random)."""
    dim, hidden, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = dim // config["num_attention_heads"] * config["num_key_value_heads"]
    t = {"token_embd.weight": rng.standard_normal((vocab, dim)).astype(np.float32),
         "output_norm.weight": np.ones(dim, dtype=np.float32),
         "output.weight": (rng.standard_normal((vocab, dim)) / np.sqrt(dim)).astype(np.float32)}
    shapes = {"attn_q": (dim, dim), "attn_k": (kv, dim), "attn_v": (kv, dim), "attn_output": (dim, dim),
              "ffn_gate": (hidden, dim), "ffn_up": (hidden, dim), "ffn_down": (dim, hidden)}
    for layer in range(config["num_hidden_layers"]):
        t[f"blk.{layer}.attn_norm.weight"] = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        t[f"blk.{layer}.ffn_norm.weight"] = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        for name, shape in shapes.items():
            t[f"blk.{layer}.{name}.weight"] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
    return t


def tiny_dir(work):
    hf_dir = os.path.join(work, "tiny_q4_k_m")
    os.makedirs(hf_dir, exist_ok=True)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(TINY, f)
    return hf_dir


def check_q4_k_m(fail, tools, src, work):
    hf_dir = tiny_dir(work)
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(src, "models/stories260K/tok512.model"))
    path = write_model(hf_dir, "llama", q4_k_m_type, os.path.join(work, "tiny-Q4_K_M.gguf"),
                       tiny_tensors(np.random.default_rng(7)), tokenizer=sentencepiece_writer(sp))
    types = sorted({t.tensor_type.name for t in gguf.GGUFReader(path).tensors if len(t.shape) == 2})
    label = f"tiny llama 256/512 in the Q4_K_M layout ({', '.join(types)})"
    check_tensors(fail, tools.probe, path, TINY_CFG, "llama", label)
    check_kuiper_types(fail, tools.probe, path, label, TINY_CFG, "llama")
    check_against_dequantized(fail, tools.probe, hf_dir, "llama", path, label, work, LONG_TOKENS)
    result = subprocess.run([tools.infer, "-m", path, "-p", "Once upon a time", "--temp", "0", "-n", "24",
                             "--ignore-eos"], capture_output=True, text=True)
    fail.check(result.returncode == 0 and len(result.stdout.strip()) > len("Once upon a time"),
               f"{label}: llama_infer generates from the .gguf alone: {result.stdout.strip()[:80]!r}"
               + (f" ({result.stderr.strip().splitlines()[-1:]})" if result.returncode else ""))


def check_random_blocks(fail, tool, work):
    """Every matrix random blocks of Q4_0, Q4_1, Q4_K, Q6_K in turn: exact, whatever the bits."""
    hf_dir = tiny_dir(work)
    rng = np.random.default_rng(11)
    tensors = tiny_tensors(rng)
    types = [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K]
    matrices = [n for n, a in tensors.items() if a.ndim == 2]
    for i, name in enumerate(matrices):
        qtype = types[i % len(types)]
        tensors[name] = (ggml_kquants.random_blocks(*tensors[name].shape, qtype, rng), qtype)
    path = write_model(hf_dir, "llama", Q.F32, os.path.join(work, "tiny-random-blocks.gguf"), tensors)
    label = "random blocks of Q4_0, Q4_1, Q4_K, Q6_K"
    check_tensors(fail, tool, path, TINY_CFG, "llama", label)
    check_kuiper_types(fail, tool, path, label, TINY_CFG, "llama")


def check_damaged(fail, tool, work):
    """Damaged 4-/6-bit tensors in an otherwise good file: one line naming the file, non-zero exit."""
    good = os.path.join(work, "tiny-Q4_K_M.gguf")
    reader = gguf.GGUFReader(good)
    by_name = {t.name: t for t in reader.tensors}
    with open(good, "rb") as f:
        content = bytearray(f.read())

    def patched(tensor, offset, value):
        out = bytearray(content)
        at = by_name[tensor].data_offset + offset
        out[at:at + 2] = np.array([value], dtype=np.float16).tobytes()
        return out
    q6 = next(n for n, t in by_name.items() if t.tensor_type == Q.Q6_K)
    cases = {
        "NaN Q4_K scale": (patched("blk.0.attn_q.weight", 3 * 144, np.nan), "Q4_K block 3 of"),
        "infinite Q4_K minimum scale": (patched("blk.0.attn_k.weight", 2, np.inf), "Q4_K block 0 of"),
        "infinite Q6_K scale": (patched(q6, 5 * 210 + 208, -np.inf), "Q6_K block 5 of"),
        "truncated in a Q4_K tensor": (content[:by_name["blk.0.attn_q.weight"].data_offset + 100], "past the end of the file"),
    }
    for number, (name, (data, expected)) in enumerate(cases.items()):
        path = os.path.join(work, f"damaged-q4-{number}.gguf")
        with open(path, "wb") as f:
            f.write(data)
        expect_one_line(fail, tool, path, name, expected)
    # A Q4_1 matrix whose rows are not whole blocks (the file's own shape check).
    path = os.path.join(work, "damaged-q4-rows.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 20), dtype=np.uint8), raw_dtype=Q.Q4_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "r+b") as f:  # gguf writes whole-block shapes only: make dims[0] 16 by hand
        data = bytearray(f.read())
        marker = b"token_embd.weight" + (2).to_bytes(4, "little")
        at = data.index(marker) + len(marker)
        data[at:at + 8] = (16).to_bytes(8, "little")
        f.seek(0)
        f.write(data)
    expect_one_line(fail, tool, path, "Q4_1 rows of 16 weights", "not a multiple of the 32-weight blocks of Q4_1")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--infer", required=True, help="the built llama_infer program")
    args, src, work = parse_with_dirs(parser)
    fail = Failures()
    check_fixtures(fail, args.probe, src, work)
    check_q4_k_m(fail, args, src, work)
    check_random_blocks(fail, args.probe, work)
    check_damaged(fail, args.probe, work)
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
