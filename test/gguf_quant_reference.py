#!/usr/bin/env python3
"""Checks kuiper's reading of GGUF's block types below 8 bits (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against the `gguf` package (pip: gguf), llama.cpp's own.
Files are written at run time: Q4_0/Q4_1/Q5_0/Q5_1 by gguf's quantizer, the others by
test/ggml_kquants.py (gguf has no quantizer for them); every expected value is
gguf.quants.dequantize of the file's bytes. Q5_1 and Q5_K are requantized to int8 on reading:
their weights are checked within half an int8 step of their group, all others exactly.

  fixtures   the HF fixtures (test/data/hf) as Q4_0 and Q4_1 (F16 where rows are not whole
             blocks): every tensor kuiper loads equals gguf's dequantization exactly; Q4_0 becomes
             int4 symmetric, Q4_1 int4 with a minimum, groups of 32; prefill and decode logits
             against an F32 GGUF of gguf's dequantization, and against the fp32 HF model
  q4_k_m     a random tiny llama (dims multiples of 256) laid out as llama.cpp's Q4_K_M: Q4_K
             matrices, Q6_K output.weight and, in the layers use_more_bits picks, Q6_K attn_v and
             ffn_down; tensors exact (Q4_K: int4 with minimum, groups of 32; Q6_K: int8, groups
             of 16), prefill and decode logits against an F32 GGUF of gguf's dequantization, and
             llama_infer generates from the file alone
  layouts    the same llama as llama.cpp lays out Q5_K_M, Q5_K_S, Q3_K_M, Q2_K, IQ4_XS, IQ4_NL,
             Q5_0 and Q5_1 files (its llama_tensor_get_type for this shape): tensors, kuiper
             types, logits against an F32 GGUF of gguf's dequantization; stderr names the
             requantized matrices
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
from gguf_reference import (MODELS, TOKENS, Failures, check_tensors, dequantized_tensors,  # noqa: E402
                            expect_one_line, kuiper_names, parse_with_dirs, probe, relative, sentencepiece_writer,
                            write_model)

# What each type becomes in kuiper (probe's "quantized" entry).
KUIPER_TYPE = {Q.Q4_0: {"dtype": "int4", "group_size": 32, "mins": False},
               Q.Q4_1: {"dtype": "int4", "group_size": 32, "mins": True},
               Q.Q5_0: {"dtype": "int8", "group_size": 32, "mins": False},
               Q.Q5_1: {"dtype": "int8", "group_size": 32, "mins": False},
               Q.IQ4_NL: {"dtype": "int8", "group_size": 32, "mins": False},
               Q.Q2_K: {"dtype": "int4", "group_size": 16, "mins": True},
               Q.Q3_K: {"dtype": "int8", "group_size": 16, "mins": False},
               Q.Q4_K: {"dtype": "int4", "group_size": 32, "mins": True},
               Q.Q5_K: {"dtype": "int8", "group_size": 32, "mins": False},
               Q.Q6_K: {"dtype": "int8", "group_size": 16, "mins": False},
               Q.IQ4_XS: {"dtype": "int8", "group_size": 32, "mins": False}}
# Types with a minimum and 5-bit codes, requantized to symmetric int8 in groups of 32: each
# weight within half an int8 step (max |w| of its group / 254) of gguf's dequantization.
REQUANTIZED = (Q.Q5_1, Q.Q5_K)
REQUANTIZED_GROUP = 32
# Logits of the fixtures' Q4_0/Q4_1 files against the fp32 HF model, max |diff| / max |ref|:
# 4-bit weights move the logits of these random-weight fixtures a lot (measured 0.23-0.35).
FIXTURE_BOUND = 0.5
# Against an F32 file of the same (dequantized) weights; the tensors themselves are checked
# exactly. Prefill and decode quantize the int4 matmuls' inputs to int8 in blocks of 32 (measured
# 1.0e-2 to 2.9e-2 for both); Q5_1/Q5_K's requantization to int8 alone gives 1.2e-2 to 1.4e-2.
LOGIT_BOUND = 5e-2
# Files whose matrices all run as stored on kernels that multiply fp32 inputs (int8, and int4 in
# groups of 16, whose CPU kernel does not quantize its input): the same weights, so only the
# order of the sums differs (measured up to 8.6e-7).
EXACT_LOGIT_BOUND = 1e-5
FP32_INPUT_TYPES = (Q.Q5_0, Q.IQ4_NL, Q.Q2_K, Q.Q3_K, Q.Q6_K, Q.IQ4_XS)
LONG_TOKENS = [1, 7, 42, 100, 3, 250, 17, 64, 5, 199, 311, 2, 480, 77, 9, 150]


def check_loaded_tensors(fail, tool, path, cfg, arch, label):
    """Every tensor kuiper loads equals gguf's dequantization, the requantized ones within half
    an int8 step of their group; returns the largest error of those relative to their group's
    largest |weight|."""
    expected, types = dequantized_tensors(path, cfg, arch)
    got = probe(tool, path, tensors=list(expected))["tensors"]
    bad, worst = [], 0.0
    for name, ref in expected.items():
        value = np.asarray(got[name], dtype=np.float32)
        if types[name] not in REQUANTIZED:
            if not np.array_equal(value, ref.reshape(-1)):
                bad.append(name)
            continue
        groups = ref.reshape(-1, REQUANTIZED_GROUP).astype(np.float64)
        top = np.abs(groups).max(axis=1, keepdims=True)
        error = np.abs(value.reshape(groups.shape) - groups)
        if not np.all(error <= top / 254 * (1 + 1e-5)):
            bad.append(name)
        worst = max(worst, float((error / np.where(top > 0, top, 1)).max()))
    requantized = sum(t in REQUANTIZED for t in types.values())
    fail.check(not bad, f"{label}: {len(expected)} tensors equal gguf.quants.dequantize" +
               (f" ({requantized} requantized ones within max|group| / 254: largest {worst:.2e} of max|group|)"
                if requantized else "") + (f"; differ: {bad}" if bad else ""))
    return worst


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


def check_against_dequantized(fail, tool, hf_dir, arch, path, label, work, tokens=TOKENS, bound=LOGIT_BOUND):
    f32 = dequantized_f32(hf_dir, arch, path, os.path.join(work, os.path.basename(path)[:-5] + "-dequantized.gguf"))
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


def layout(base, attn_v=None, ffn_down=None, attn_output=None):
    """llama.cpp's llama_tensor_get_type for this llama (3 layers, GQA 2): `base` everywhere but
    output.weight (Q6_K) and the matrices whose type `attn_v`, `ffn_down`, `attn_output` (functions
    of the layer) pick."""
    overrides = {"attn_v": attn_v, "ffn_down": ffn_down, "attn_output": attn_output}

    def type_of(name):
        if name == "output.weight":
            return Q.Q6_K
        parts = name.split(".")
        pick = overrides.get(parts[2]) if parts[0] == "blk" else None
        return (pick and pick(int(parts[1]))) or base
    return type_of


def more_bits(qtype):
    """`qtype` in the layers use_more_bits picks."""
    return lambda layer: qtype if use_more_bits(layer, TINY["num_hidden_layers"]) else None


q4_k_m_type = layout(Q.Q4_K, attn_v=more_bits(Q.Q6_K), ffn_down=more_bits(Q.Q6_K))
# The file types below 8 bits that people download (llama-quantize names), laid out for this llama.
LAYOUTS = {
    "Q5_K_M": layout(Q.Q5_K, attn_v=more_bits(Q.Q6_K), ffn_down=more_bits(Q.Q6_K)),
    "Q5_K_S": layout(Q.Q5_K),
    "Q3_K_M": layout(Q.Q3_K, attn_v=lambda l: Q.Q5_K if l < 2 else Q.Q4_K, ffn_down=lambda l: Q.Q4_K,
                     attn_output=lambda l: Q.Q4_K),
    "Q2_K": layout(Q.Q2_K, attn_v=lambda l: Q.Q3_K, ffn_down=lambda l: Q.Q3_K, attn_output=lambda l: Q.Q3_K),
    "IQ4_XS": layout(Q.IQ4_XS),
    "IQ4_NL": layout(Q.IQ4_NL),
    "Q5_0": layout(Q.Q5_0),
    "Q5_1": layout(Q.Q5_1),
}


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


def check_layouts(fail, tool, src, work):
    """The llama as each of LAYOUTS: tensors, kuiper types, logits against gguf's dequantization;
    a file with requantized matrices says so on stderr."""
    hf_dir = tiny_dir(work)
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(src, "models/stories260K/tok512.model"))
    tensors = tiny_tensors(np.random.default_rng(7))
    for name, type_of in LAYOUTS.items():
        path = write_model(hf_dir, "llama", type_of, os.path.join(work, f"tiny-{name}.gguf"), tensors,
                           tokenizer=sentencepiece_writer(sp))
        types = sorted({t.tensor_type.name for t in gguf.GGUFReader(path).tensors if len(t.shape) == 2})
        label = f"tiny llama 256/512 as {name} ({', '.join(types)})"
        check_loaded_tensors(fail, tool, path, TINY_CFG, "llama", label)
        check_kuiper_types(fail, tool, path, label, TINY_CFG, "llama")
        exact = all(Q[t] in FP32_INPUT_TYPES for t in types)
        check_against_dequantized(fail, tool, hf_dir, "llama", path, label, work, LONG_TOKENS,
                                  EXACT_LOGIT_BOUND if exact else LOGIT_BOUND)
        requantized = sum(Q[t] in REQUANTIZED for t in types)
        stderr = subprocess.run([tool, path, "--tokens", "1"], capture_output=True, text=True).stderr
        said = "requantized to int8" in stderr
        fail.check(said == bool(requantized), f"{label}: stderr " + ("names" if said else "has no") +
                   " requantization" + (f": {next(l for l in stderr.splitlines() if 'requantized' in l)[-110:]!r}"
                                        if said else ""))


def check_random_blocks(fail, tool, work):
    """Every matrix random blocks of one type after another: exact (within half an int8 step for
    the requantized types), whatever the bits."""
    hf_dir = tiny_dir(work)
    rng = np.random.default_rng(11)
    tensors = tiny_tensors(rng)
    types = list(KUIPER_TYPE)
    matrices = [n for n, a in tensors.items() if a.ndim == 2]
    for i, name in enumerate(matrices):
        qtype = types[i % len(types)]
        tensors[name] = (ggml_kquants.random_blocks(*tensors[name].shape, qtype, rng), qtype)
    path = write_model(hf_dir, "llama", Q.F32, os.path.join(work, "tiny-random-blocks.gguf"), tensors)
    label = f"random blocks of {', '.join(t.name for t in types)}"
    check_loaded_tensors(fail, tool, path, TINY_CFG, "llama", label)
    check_kuiper_types(fail, tool, path, label, TINY_CFG, "llama")


def check_damaged(fail, tool, work):
    """Damaged 4-/6-bit tensors in an otherwise good file: one line naming the file, non-zero exit."""
    def patcher(layout_name):
        good = os.path.join(work, f"tiny-{layout_name}.gguf")
        by_name = {t.name: t for t in gguf.GGUFReader(good).tensors}
        with open(good, "rb") as f:
            content = bytearray(f.read())

        def patched(tensor, offset, value):
            out = bytearray(content)
            at = by_name[tensor].data_offset + offset
            out[at:at + 2] = np.array([value], dtype=np.float16).tobytes()
            return out
        return patched, by_name, content
    patched, by_name, content = patcher("Q4_K_M")
    q6 = next(n for n, t in by_name.items() if t.tensor_type == Q.Q6_K)
    cases = {
        "NaN Q4_K scale": (patched("blk.0.attn_q.weight", 3 * 144, np.nan), "Q4_K block 3 of"),
        "infinite Q4_K minimum scale": (patched("blk.0.attn_k.weight", 2, np.inf), "Q4_K block 0 of"),
        "infinite Q6_K scale": (patched(q6, 5 * 210 + 208, -np.inf), "Q6_K block 5 of"),
        "truncated in a Q4_K tensor": (content[:by_name["blk.0.attn_q.weight"].data_offset + 100], "past the end of the file"),
    }
    # One case per decoder of the added types, the requantized ones included.
    for layout_name, tensor, qtype, block, offset, value in [
            ("Q5_K_M", "blk.0.attn_q.weight", Q.Q5_K, 2, 2, np.nan), ("Q5_1", "blk.1.ffn_up.weight", Q.Q5_1, 7, 2, np.inf),
            ("Q5_0", "blk.0.attn_q.weight", Q.Q5_0, 4, 0, np.nan), ("Q2_K", "blk.0.attn_q.weight", Q.Q2_K, 1, 82, np.inf),
            ("Q3_K_M", "blk.0.attn_q.weight", Q.Q3_K, 6, 108, np.nan), ("IQ4_NL", "blk.2.ffn_gate.weight", Q.IQ4_NL, 9, 0, -np.inf),
            ("IQ4_XS", "blk.0.attn_q.weight", Q.IQ4_XS, 3, 0, np.nan)]:
        patched, _, _ = patcher(layout_name)
        block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
        cases[f"{value} in a {qtype.name} block"] = (patched(tensor, block * block_bytes + offset, value),
                                                      f"{qtype.name} block {block} of")
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
    check_layouts(fail, args.probe, src, work)
    check_random_blocks(fail, args.probe, work)
    check_damaged(fail, args.probe, work)
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
