#!/usr/bin/env python3
"""Checks kuiper's GGUF reader and writer against the `gguf` package (pip: gguf), llama.cpp's own.

Every GGUF file here is written at run time by gguf.GGUFWriter from the tiny HF fixtures
(test/data/hf) the way llama.cpp's convert_hf_to_gguf.py lays them out: `llama` q/k rows (and
biases) permuted into Meta's interleaved order (LlamaModel.permute), `qwen2`/`qwen3` stored
as in HF, LLaMA 3 RoPE scaling as a rope_freqs.weight factor tensor, 1-D tensors F32, Q8_0
matrices whose rows are not whole blocks falling back to F16. Checks:

  tensors     every tensor kuiper loads (checkpoint_probe) equals gguf.quants.dequantize of the
              file's tensor, moved into kuiper's interleaved q/k order where the arch stores HF
              order (exact equality, F32/F16/BF16/Q8_0)
  logits      kuiper's logits of the GGUF model against kuiper's logits of the same fixture read
              from HF safetensors (F32: max |diff| / max |ref| <= 1e-5); F16/BF16/Q8_0 within
              stated bounds; Q8_0 (with its F16 fallback matrices) also against an F32 GGUF of
              gguf's own dequantization
  tokenizers  tokenizer.ggml.* written from LLaMA 2's tokenizer.model (model "llama") and from
              tokenizer.json files of the LLaMA 3, Qwen2, Qwen3 and SmolLM2 layouts (model "gpt2",
              pre llama-bpe / qwen2 / smollm): kuiper_tokenize on the .gguf against sentencepiece
              and the tokenizers library on the corpus (tokenizer_reference.py's checks)
  chat        tokenizer.chat_template picks kuiper's layout (llama2, llama3, chatml) from the .gguf
              alone; an unknown template is refused
  errors      damaged headers: one line on stderr naming the file and the field, non-zero exit
  export      kuiper_export --out-format gguf: gguf.GGUFReader finds llama.cpp's keys and
              tensors, and kuiper re-loads the file with the source's logits

Usage: gguf_reference.py --probe build/test/checkpoint_probe --tokenize build/demo/kuiper_tokenize
                         --export build/tools/kuiper_export --chat-tool build/test/chat_template_tokens
                         [--source-dir .] [--work-dir D] [--only models|tokenizers|errors|export]
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import gguf
import sentencepiece
import tokenizers
from gguf import GGMLQuantizationType as Q
from tiktoken.load import load_tiktoken_bpe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import ggml_kquants  # noqa: E402
import hf_tokenizer_files  # noqa: E402
import tokenizer_reference  # noqa: E402

TOKENS = [1, 7, 42, 100, 3, 250, 17, 64, 5, 199]
# (fixture, GGUF architecture); mistral_tiny's sliding window has no llama-arch GGUF key.
MODELS = [("llama2_tiny", "llama"), ("llama3_tiny", "llama"), ("llama_bias_tiny", "llama"),
          ("qwen2_tiny", "qwen2"), ("qwen3_tiny", "qwen3")]
TYPES = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16, "Q8_0": Q.Q8_0}
# Logits of a converted model against the fp32 HF model, max |diff| / max |ref|. Measured on these
# fixtures (printed below); the bounds leave room for the rounding of each type.
BOUNDS = {"F32": 1e-5, "F16": 5e-3, "BF16": 3e-2, "Q8_0": 5e-2}


class Failures:
    def __init__(self):
        self.count = 0

    def check(self, ok, message):
        print(("ok    " if ok else "FAIL  ") + message)
        self.count += 0 if ok else 1

    def exit_code(self):
        print(f"FAILED: {self.count} checks" if self.count else "OK")
        return 1 if self.count else 0


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"]).astype(np.float32)
    return out


def permute(w, heads):
    """llama.cpp's LlamaModel.permute: HF's rotate-half rows into Meta's interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_theta(cfg):
    return cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)


def llama3_rope_factors(cfg, head_dim):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rope.get("rope_type") != "llama3":
        return None
    freqs = 1.0 / (rope_theta(cfg) ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def hf_to_gguf_tensors(cfg, arch, weights):
    """HF tensor name -> (GGUF name, array in the file's layout)."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.o_proj": "attn_output", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight"}
    out = []
    for name, w in weights.items():
        if name == "model.embed_tokens.weight":
            out.append(("token_embd.weight", w))
        elif name == "model.norm.weight":
            out.append(("output_norm.weight", w))
        elif name == "lm_head.weight":
            if not cfg.get("tie_word_embeddings", False):
                out.append(("output.weight", w))
        else:
            parts = name.split(".")
            layer, rest = int(parts[2]), ".".join(parts[3:])
            for hf, g in names.items():
                if rest == hf or rest.startswith(hf + "."):
                    gname = g + rest[len(hf):]
                    break
            else:
                raise ValueError(f"unmapped tensor {name}")
            if arch == "llama" and rest.startswith("self_attn.q_proj."):
                w = permute(w, heads)
            if arch == "llama" and rest.startswith("self_attn.k_proj."):
                w = permute(w, kv_heads)
            out.append((f"blk.{layer}.{gname}", w))
    return out


def add_matrix(writer, name, w, qtype):
    """`qtype`: one type for every matrix, or a function of the tensor's name giving it; `w`: a
    float array, or (blocks, type) stored as they are."""
    if isinstance(w, tuple):
        writer.add_tensor(name, w[0], raw_dtype=w[1])
        return
    if callable(qtype):
        qtype = qtype(name)
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if w.ndim == 1 or qtype == Q.F32:
        writer.add_tensor(name, w.astype(np.float32))
    elif qtype == Q.F16 or w.shape[-1] % block != 0:  # the converter's fallback
        writer.add_tensor(name, w.astype(np.float16))
    else:
        writer.add_tensor(name, ggml_kquants.quantize(w, qtype), raw_dtype=qtype)


def write_model(hf_dir, arch, qtype, path, tensors=None, tokenizer=None):
    """A GGUF of the HF fixture (or of `tensors`, GGUF name -> float array, in its place)."""
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    dim, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or dim // heads
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(dim)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(rope_theta(cfg))
    w.add_rope_dimension_count(head_dim)
    if head_dim != dim // heads or arch == "qwen3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_bos_token_id(cfg.get("bos_token_id") or 1)
    eos = cfg.get("eos_token_id", 2)
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    if tokenizer:
        tokenizer(w)
    if tensors is None:
        tensors = dict(hf_to_gguf_tensors(cfg, arch, read_safetensors(os.path.join(hf_dir, "model.safetensors"))))
        factors = llama3_rope_factors(cfg, head_dim)
        if factors is not None:
            tensors["rope_freqs.weight"] = factors
    for name, t in tensors.items():
        add_matrix(w, name, t, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def probe(tool, model, tensors=(), tokens=TOKENS):
    args = [tool, model, "--tokens", ",".join(map(str, tokens))]
    for t in tensors:
        args += ["--tensor", t]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"checkpoint_probe {model} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def relative(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def kuiper_names(cfg, arch, gguf_name):
    """kuiper's name of a GGUF tensor and how many heads its rows are permuted over (0: none)."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    fixed = {"token_embd.weight": "token_embedding", "output.weight": "classifier", "output_norm.weight": "final_norm"}
    if gguf_name in fixed:
        return fixed[gguf_name], 0
    _, layer, rest = gguf_name.split(".", 2)
    names = {"attn_q.weight": ("wq", heads), "attn_k.weight": ("wk", kv_heads), "attn_v.weight": ("wv", 0),
             "attn_output.weight": ("wo", 0), "ffn_gate.weight": ("w1", 0), "ffn_down.weight": ("w2", 0),
             "ffn_up.weight": ("w3", 0), "attn_norm.weight": ("attention_norm", 0),
             "ffn_norm.weight": ("ffn_norm", 0), "attn_q.bias": ("bq", heads), "attn_k.bias": ("bk", kv_heads),
             "attn_v.bias": ("bv", 0), "attn_output.bias": ("bo", 0), "ffn_gate.bias": ("b1", 0),
             "ffn_down.bias": ("b2", 0), "ffn_up.bias": ("b3", 0), "attn_q_norm.weight": ("q_norm", 1),
             "attn_k_norm.weight": ("k_norm", 1)}
    name, permuted_heads = names[rest]
    return f"layers.{layer}.{name}", permuted_heads if arch != "llama" else 0


def dequantized_tensors(path, cfg, arch):
    """gguf's dequantization of every tensor kuiper loads, by kuiper's name, in kuiper's q/k order,
    with the file's type of each."""
    expected, types = {}, {}
    for t in gguf.GGUFReader(path).tensors:
        if t.name == "rope_freqs.weight":
            continue
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        values = values.reshape(list(reversed([int(d) for d in t.shape])))
        name, heads = kuiper_names(cfg, arch, t.name)
        expected[name] = permute(values, heads) if heads else values
        types[name] = t.tensor_type
    return expected, types


def check_tensors(fail, tool, path, cfg, arch, label):
    """Every tensor kuiper loads equals gguf's dequantization, in kuiper's q/k order."""
    expected, _ = dequantized_tensors(path, cfg, arch)
    got = probe(tool, path, tensors=list(expected))["tensors"]
    bad = [n for n in expected if not np.array_equal(np.asarray(got[n], dtype=np.float32), expected[n].reshape(-1))]
    fail.check(not bad, f"{label}: {len(expected)} tensors equal gguf.quants.dequantize" + (f"; differ: {bad}" if bad else ""))


def check_models(fail, tool, src, work):
    for fixture, arch in MODELS:
        hf_dir = os.path.join(src, "test/data/hf", fixture)
        cfg = json.load(open(os.path.join(hf_dir, "config.json")))
        reference = np.array(probe(tool, hf_dir)["logits"])
        for type_name, qtype in TYPES.items():
            path = write_model(hf_dir, arch, qtype, os.path.join(work, f"{fixture}-{type_name}.gguf"))
            label = f"{fixture} ({arch}, {type_name})"
            check_tensors(fail, tool, path, cfg, arch, label)
            got = probe(tool, path)
            if type_name == "F32":
                # Version 2 differs from 3 only in what its header may hold: the same file as v2 reads the same.
                with open(path, "rb") as f:
                    v2 = bytearray(f.read())
                v2[4:8] = struct.pack("<I", 2)
                with open(path[:-5] + "-v2.gguf", "wb") as f:
                    f.write(v2)
                fail.check(probe(tool, path[:-5] + "-v2.gguf")["logits"] == got["logits"], f"{label}: as GGUF v2, the same logits")
            error = relative(got["logits"], reference)
            fail.check(error <= BOUNDS[type_name],
                       f"{label}: logits vs the HF safetensors model: max rel error {error:.2e} (bound {BOUNDS[type_name]:.0e})")
            reader = gguf.GGUFReader(path)
            if qtype == Q.Q8_0:
                # The same weights as F32, dequantized by gguf: kuiper's int8 kernels (and, where rows
                # are not whole blocks, F16 matrices run as F16 beside them) against fp32.
                plain = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
                    list(reversed([int(d) for d in t.shape]))) for t in reader.tensors}
                f32 = write_model(hf_dir, arch, Q.F32, os.path.join(work, f"{fixture}-Q8_0-dequantized.gguf"), plain)
                error = relative(got["logits"], probe(tool, f32)["logits"])
                fail.check(error <= 1e-4, f"{label}: logits vs gguf's dequantization as F32: max rel error {error:.2e} (bound 1e-04)")


# ---- tokenizers ----

def sentencepiece_writer(sp):
    """tokenizer.ggml.* of a SentencePiece model, as convert_hf_to_gguf.py's _create_vocab_sentencepiece."""
    def write(w):
        tokens, scores, types = [], [], []
        for i in range(sp.get_piece_size()):
            tokens.append(sp.id_to_piece(i))
            scores.append(sp.get_score(i))
            types.append(gguf.TokenType.UNKNOWN if sp.is_unknown(i) else gguf.TokenType.CONTROL if sp.is_control(i)
                         else gguf.TokenType.UNUSED if sp.is_unused(i) else gguf.TokenType.BYTE if sp.is_byte(i)
                         else gguf.TokenType.NORMAL)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(sp.unk_id())
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
    return write


def byte_level_writer(doc, pre, bos=None):
    """tokenizer.ggml.* of a byte-level tokenizer.json, as the converter's get_vocab_base."""
    def write(w):
        vocab = dict(doc["model"]["vocab"])
        special = {}
        for t in doc["added_tokens"]:
            vocab[t["content"]] = t["id"]
            special[t["id"]] = t["special"]
        size = max(vocab.values()) + 1
        tokens = [f"[PAD{i}]" for i in range(size)]
        for token, i in vocab.items():
            tokens[i] = token
        types = [gguf.TokenType.NORMAL if i not in special else
                 gguf.TokenType.CONTROL if special[i] else gguf.TokenType.USER_DEFINED for i in range(size)]
        merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        if bos is not None:
            w.add_bos_token_id(vocab[bos])
        w.add_add_bos_token(bos is not None)
    return write


def write_tokenizer(path, writer, chat_template=None, arch="llama"):
    w = gguf.GGUFWriter(path, arch)
    writer(w)
    if chat_template:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def check_chat_template(fail, chat_tool, path, expect):
    """The template kuiper chooses for a model given only as the .gguf (tokenizer.chat_template)."""
    result = subprocess.run([chat_tool, "-t", path, "--model", path], input='{"user": "Hi"}\n',
                            capture_output=True, text=True)
    if expect == "refused":
        lines = result.stderr.strip().splitlines()
        fail.check(result.returncode != 0 and len(lines) == 1 and "tokenizer.chat_template" in lines[0],
                   f"{os.path.basename(path)}: an unknown chat template is refused: {lines[-1] if lines else ''}")
        return
    first = result.stdout.split("\n")[0]
    fail.check(result.returncode == 0 and first.startswith(f"template {expect} "),
               f"{os.path.basename(path)}: tokenizer.chat_template chooses {expect}: {first or result.stderr.strip()}")


def check_tokenizers(fail, tool_path, chat_tool, src, work):
    texts = tokenizer_reference.load_corpus(os.path.join(src, "test/data/tokenizer_corpus.txt"))
    templates = {t["name"]: t["template"] for t in
                 json.load(open(os.path.join(src, "test/data/chat_templates/templates.json")))["templates"]}
    tool = tokenizer_reference.Tool(tool_path)
    report = tokenizer_reference.Report()
    llama2 = sentencepiece.SentencePieceProcessor(model_file=os.path.join(src, "models/tokenizers/llama2/tokenizer.model"))
    path = write_tokenizer(os.path.join(work, "tok-llama2.gguf"), sentencepiece_writer(llama2), templates["llama-2-chat"])
    tokenizer_reference.check_sentencepiece(tool, report, "GGUF llama (from LLaMA 2's tokenizer.model) vs sentencepiece",
                                            path, llama2, texts)
    check_chat_template(fail, chat_tool, path, "llama2")
    gemma = write_tokenizer(os.path.join(work, "tok-llama2-gemma-template.gguf"), sentencepiece_writer(llama2),
                            templates["gemma-2"])
    check_chat_template(fail, chat_tool, gemma, "refused")
    ranks = load_tiktoken_bpe(os.path.join(src, "models/tokenizers/llama3/tokenizer.model"))
    vocab, merges = hf_tokenizer_files.byte_level_bpe(ranks)
    layouts = [("llama3", hf_tokenizer_files.llama3(vocab, merges, tokenizer_reference.llama3_special_tokens(), False),
                "llama-bpe", "<|begin_of_text|>", "llama-3.1-instruct", "llama3"),
               ("qwen2", hf_tokenizer_files.qwen(vocab, merges, qwen3=False), "qwen2", None, "qwen2.5-instruct", "chatml"),
               ("qwen3", hf_tokenizer_files.qwen(vocab, merges, qwen3=True), "qwen2", None, "qwen3", "chatml"),
               ("smollm2", hf_tokenizer_files.smollm2(vocab, merges), "smollm", None, "smollm2-instruct", "chatml")]
    for name, doc, pre, bos, template, expect in layouts:
        json_path = tokenizer_reference.write_json(doc, os.path.join(work, f"tok-{name}", "tokenizer.json"))
        path = write_tokenizer(os.path.join(work, f"tok-{name}.gguf"), byte_level_writer(doc, pre, bos), templates[template])
        tokenizer_reference.check_hf_file(tool, report, f"GGUF gpt2 pre={pre} ({name} layout) vs tokenizers",
                                          json_path, texts, kuiper_path=path)
        check_chat_template(fail, chat_tool, path, expect)
    for line in report.lines:
        print("ok    " + line)
    fail.check(not report.failed, f"tokenizers from GGUF metadata: {len(texts)} corpus cases each")
    # An unknown pre-tokenizer is refused, not guessed.
    unknown = dict(layouts[1][1])
    path = write_tokenizer(os.path.join(work, "tok-unknown-pre.gguf"), byte_level_writer(unknown, "falcon"))
    refused, message = tool.refuses(path, b"x")
    fail.check(refused and "tokenizer.ggml.pre 'falcon'" in message and len(message.splitlines()) == 1,
               f"unknown pre-tokenizer refused: {message}")


# ---- damaged files ----

def gguf_bytes(kvs, tensors, version=3, alignment=32, data=b"", tensor_count=None, kv_count=None):
    """A GGUF file built by hand, so that each field can be made wrong on its own."""
    def string(s):
        b = s.encode() if isinstance(s, str) else s
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if tensor_count is None else tensor_count,
                                len(kvs) if kv_count is None else kv_count)
    for key, type_id, payload in kvs:
        out += string(key) + struct.pack("<I", type_id) + payload
    for name, dims, ggml_type, offset in tensors:
        out += string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def check_errors(fail, tool, work):
    def s(v):
        b = v.encode()
        return struct.pack("<Q", len(b)) + b
    arch = ("general.architecture", 8, s("llama"))
    emb = ("token_embd.weight", [32, 4], 0, 0)
    data = b"\0" * 512
    cases = {
        "truncated in a key": (gguf_bytes([arch], [emb], data=data)[:40], "key of metadata entry 0"),
        "truncated in the tensor infos": (gguf_bytes([arch], [emb], data=data)[:110], "dimension 1 of tensor token_embd.weight"),
        "tensor_count past the end": (gguf_bytes([arch], [emb], tensor_count=1 << 40, data=data), "tensor_count"),
        "string length past the end": (gguf_bytes([("general.architecture", 8, struct.pack("<Q", 1 << 50) + b"llama")], []),
                                       "general.architecture"),
        "array length past the end": (gguf_bytes([("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 1 << 40))], []),
                                      "tokenizer.ggml.tokens"),
        "arrays nested too deep": (gguf_bytes([("x", 9, struct.pack("<IQ", 9, 1) * 6 + struct.pack("<IQ", 4, 0))], []), "nests"),
        "unknown value type": (gguf_bytes([("x", 77, b"")], []), "unknown value type"),
        "version 1": (gguf_bytes([arch], [], version=1), "version 1"),
        "duplicate key": (gguf_bytes([arch, arch], [emb], data=data), "appears twice"),
        "duplicate tensor": (gguf_bytes([arch], [emb, ("token_embd.weight", [32, 4], 0, 512)], data=data * 2), "appears twice"),
        "unknown tensor type": (gguf_bytes([arch], [("token_embd.weight", [32, 4], 99, 0)], data=data), "unknown ggml type"),
        "misaligned tensor": (gguf_bytes([arch], [("token_embd.weight", [32, 4], 0, 8)], data=data), "alignment"),
        "overlapping tensors": (gguf_bytes([arch], [emb, ("output.weight", [32, 4], 0, 256)], data=data * 2), "overlap"),
        "tensor past the end": (gguf_bytes([arch], [("token_embd.weight", [32, 4], 0, 512)], data=data), "runs past the end"),
        "bad alignment": (gguf_bytes([arch, ("general.alignment", 4, struct.pack("<I", 12))], [emb], data=data), "general.alignment"),
        "unknown architecture": (gguf_bytes([("general.architecture", 8, s("gemma2"))], [emb], data=data), "gemma2"),
        "IQ2_XXS tensor": (None, "has type IQ2_XXS, which kuiper does not read yet"),
    }
    for number, (name, (content, expected)) in enumerate(cases.items()):
        path = os.path.join(work, f"damaged-{number}.gguf")
        if content is None:  # a complete model with one matrix in a type kuiper does not read
            w = gguf.GGUFWriter(path, "llama")
            for key, value in [("context_length", 64), ("embedding_length", 256), ("block_count", 1),
                               ("feed_forward_length", 256), ("attention.head_count", 4)]:
                w.add_uint32(f"llama.{key}", value)
            w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
            rng = np.random.default_rng(0)
            w.add_tensor("token_embd.weight", rng.standard_normal((32, 256), dtype=np.float32))
            w.add_tensor("blk.0.attn_norm.weight", np.ones(256, dtype=np.float32))
            # Zero IQ2_XXS blocks (66 bytes per 256 weights): only the type matters here.
            w.add_tensor("blk.0.attn_q.weight", np.zeros((256, 66), dtype=np.uint8), raw_dtype=Q.IQ2_XXS)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
        else:
            with open(path, "wb") as f:
                f.write(content)
        expect_one_line(fail, tool, path, name, expected)


def expect_one_line(fail, tool, path, name, expected):
    """`tool path` refuses the file: non-zero exit, one line on stderr naming it and saying `expected`."""
    result = subprocess.run([tool, path], capture_output=True, text=True)
    lines = result.stderr.strip().splitlines()
    ok = result.returncode != 0 and len(lines) == 1 and path in lines[0] and expected in lines[0].split(path, 1)[1]
    fail.check(ok, f"refused, {name}: {lines[-1] if lines else '(no message)'}")


# ---- kuiper_export --out-format gguf ----

def export(tool, source, out, *flags):
    result = subprocess.run([tool, source, out, "--out-format", "gguf", *flags], capture_output=True, text=True)
    return result.returncode, (result.stderr.strip().splitlines() or [""])[-1]


def gguf_field(reader, key):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def same_value(a, b):
    if isinstance(b, str) or a is None:
        return a == b
    return bool(np.allclose(a, b, rtol=1e-7))


def check_exported_model(fail, tools, src, work):
    """The HF fixtures exported by kuiper against the same fixtures written by gguf the converter's way."""
    for fixture, arch in MODELS:
        hf_dir = os.path.join(src, "test/data/hf", fixture)
        cfg = json.load(open(os.path.join(hf_dir, "config.json")))
        reference = np.array(probe(tools.probe, hf_dir)["logits"])
        aligned = cfg["hidden_size"] % 32 == 0 and cfg["intermediate_size"] % 32 == 0 and \
            (cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]) * cfg["num_attention_heads"] % 32 == 0
        for type_name, flags in [("F32", ["--quant", "none"]), ("F16", ["--quant", "none", "--dtype", "fp16"]),
                                 ("BF16", ["--quant", "none", "--dtype", "bf16"]), ("Q8_0", [])]:
            out = os.path.join(work, f"exported-{fixture}-{type_name}.gguf")
            label = f"kuiper_export {fixture} -> GGUF {type_name}"
            code, message = export(tools.export, hf_dir, out, *flags)
            if type_name == "Q8_0" and not aligned:
                fail.check(code != 0 and "groups of 32" in message, f"{label}: refused (rows not whole Q8_0 blocks): {message}")
                continue
            if code != 0:
                fail.check(False, f"{label}: {message}")
                continue
            mine = gguf.GGUFReader(out)
            theirs = gguf.GGUFReader(write_model(hf_dir, arch, TYPES[type_name], os.path.join(work, f"gguf-{fixture}-{type_name}.gguf")))
            keys = {f.name: f.contents() for f in theirs.fields.values() if f.name.startswith(arch + ".") or f.name == "general.architecture"}
            wrong = [k for k, v in keys.items() if not same_value(gguf_field(mine, k), v)]
            fail.check(not wrong, f"{label}: gguf.GGUFReader finds the converter's {len(keys)} model keys" +
                       (f"; differ: {wrong}" if wrong else ""))
            ours = {t.name: t for t in mine.tensors}
            differ = []
            for t in theirs.tensors:
                m = ours.get(t.name)
                if m is None or m.tensor_type != t.tensor_type or list(m.shape) != list(t.shape):
                    differ.append(t.name)
                elif not np.array_equal(np.asarray(m.data), np.asarray(t.data)):
                    # Q8_0: kuiper rounds w / scale, gguf w * (1 / scale); allow one step in a few weights.
                    a = gguf.quants.dequantize(m.data, m.tensor_type)
                    b = gguf.quants.dequantize(t.data, t.tensor_type)
                    step = np.abs(b).max() / 127
                    if type_name != "Q8_0" or np.abs(a - b).max() > step * 1.01 or np.mean(a != b) > 1e-3:
                        differ.append(t.name)
            fail.check(not differ and len(ours) == len(theirs.tensors),
                       f"{label}: {len(ours)} tensors, names/types/shapes/values as the converter writes them" +
                       (f"; differ: {differ}" if differ else ""))
            error = relative(probe(tools.probe, out)["logits"], reference)
            fail.check(error <= (0.0 if type_name == "F32" else BOUNDS[type_name]),
                       f"{label}: kuiper re-loads it, logits vs the HF model: max rel error {error:.2e}")


def train_byte_level_tokenizer(texts, layout, vocab_size, path):
    """A small byte-level BPE tokenizer.json of the `layout` family's components ("qwen2": NFC +
    Qwen2 regex; "llama3": LLaMA 3 regex, ignore_merges), trained on `texts` with tokenizers."""
    pattern = hf_tokenizer_files.QWEN2_PATTERN if layout == "qwen2" else hf_tokenizer_files.LLAMA3_PATTERN
    trained = tokenizers.Tokenizer(tokenizers.models.BPE(ignore_merges=layout == "llama3"))
    if layout == "qwen2":
        trained.normalizer = tokenizers.normalizers.NFC()
    trained.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated"),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trained.decoder = tokenizers.decoders.ByteLevel()
    trained.train_from_iterator(texts, tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    trained.save(path)
    return path


def check_exported_byte_level(fail, tools, src, work, texts):
    """qwen2_tiny exported with a small Qwen2-layout byte-level BPE trained here (fewer tokens than the
    model's vocabulary: the rest are padded as the converter pads them)."""
    json_path = train_byte_level_tokenizer(texts, "qwen2", 280, os.path.join(work, "trained-qwen2", "tokenizer.json"))
    out = os.path.join(work, "exported-qwen2_tiny-with-tokenizer.gguf")
    code, message = export(tools.export, os.path.join(src, "test/data/hf/qwen2_tiny"), out, "--quant", "none",
                           "--tokenizer", json_path)
    reader = gguf.GGUFReader(out) if code == 0 else None
    tokens = gguf_field(reader, "tokenizer.ggml.tokens") if reader else []
    fail.check(code == 0 and gguf_field(reader, "tokenizer.ggml.model") == "gpt2" and
               gguf_field(reader, "tokenizer.ggml.pre") == "qwen2" and len(tokens) == 288 and
               tokens[-1] == "[PAD287]" and len(gguf_field(reader, "tokenizer.ggml.merges")) > 0,
               f"tokenizer.json exported as gpt2, pre qwen2, {len(tokens)} tokens (padded to the model's 288) {message}")
    report = tokenizer_reference.Report()
    tokenizer_reference.check_hf_file(tokenizer_reference.Tool(tools.tokenize), report,
                                      "exported qwen2_tiny.gguf vs tokenizers on the trained tokenizer.json",
                                      json_path, texts, kuiper_path=out)
    for line in report.lines:
        print("ok    " + line)
    fail.check(not report.failed, "exported byte-level tokenizer")


def check_exported_tokenizer(fail, tools, src, work):
    """stories260K (tok512.model beside it) exported with its tokenizer."""
    source = os.path.join(src, "models/stories260K/stories260K.bin")
    out = os.path.join(work, "exported-stories260K-F32.gguf")
    code, message = export(tools.export, source, out, "--quant", "none")
    fail.check(code == 0, f"kuiper_export stories260K -> GGUF F32 with tok512.model: {message}")
    reader = gguf.GGUFReader(out)
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(src, "models/stories260K/tok512.model"))
    tokens = gguf_field(reader, "tokenizer.ggml.tokens")
    fail.check(gguf_field(reader, "tokenizer.ggml.model") == "llama" and
               tokens == [sp.id_to_piece(i) for i in range(sp.get_piece_size())] and
               np.allclose(gguf_field(reader, "tokenizer.ggml.scores"), [sp.get_score(i) for i in range(sp.get_piece_size())]) and
               gguf_field(reader, "tokenizer.ggml.bos_token_id") == sp.bos_id() and
               gguf_field(reader, "tokenizer.ggml.eos_token_id") == sp.eos_id(),
               "exported tokenizer.ggml.* equal tok512.model's pieces, scores and special ids (sentencepiece)")
    # Ids only: GGUF has no field for tok512's own unk_surface, so <unk> decodes as SentencePiece's
    # default " ⁇ " there (decoding is checked on LLaMA 2's tokenizer in check_tokenizers).
    texts = tokenizer_reference.load_corpus(os.path.join(src, "test/data/tokenizer_corpus.txt"))
    report = tokenizer_reference.Report()
    tool = tokenizer_reference.Tool(tools.tokenize)
    specials = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
    for bos, allow in [(False, False), (True, False), (True, True)]:
        report.check(f"exported stories260K.gguf vs sentencepiece on tok512.model bos={int(bos)} allow_special={int(allow)}",
                     texts, [tokenizer_reference.sentencepiece_reference(sp, t, bos, allow, specials) for t in texts],
                     tool.encode(out, texts, bos, allow))
    for line in report.lines:
        print("ok    " + line)
    fail.check(not report.failed, f"exported tokenizer: {len(texts)} corpus cases, 3 option sets")
    tokens_in = [1, 300, 42, 7, 100]
    same = probe(tools.probe, out, tokens=tokens_in)["logits"] == probe(tools.probe, source, tokens=tokens_in)["logits"]
    fail.check(same, "exported stories260K.gguf: logits identical to stories260K.bin")
    # Re-exporting the GGUF copies its tokenizer and keeps the logits.
    again = os.path.join(work, "exported-stories260K-again.gguf")
    code, message = export(tools.export, out, again, "--quant", "none")
    fail.check(code == 0 and gguf_field(gguf.GGUFReader(again), "tokenizer.ggml.tokens") == tokens and
               probe(tools.probe, again, tokens=tokens_in)["logits"] == probe(tools.probe, source, tokens=tokens_in)["logits"],
               f"GGUF -> GGUF re-export keeps tokenizer and logits {message}")
    check_exported_byte_level(fail, tools, src, work, texts)
    code, message = export(tools.export, source, os.path.join(work, "refused.gguf"))
    fail.check(code != 0 and "groups of 32" in message, f"Q8_0 of a model whose rows are not whole blocks is refused: {message}")


def parse_with_dirs(parser):
    """`parser`'s arguments plus --source-dir (the repository) and --work-dir (made if missing; a fresh
    temporary folder by default): (args, source dir, work dir)."""
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--work-dir")
    args = parser.parse_args()
    work = args.work_dir or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    return args, os.path.abspath(args.source_dir), work


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--tokenize", required=True)
    parser.add_argument("--export", required=True)
    parser.add_argument("--chat-tool", required=True, help="the built chat_template_tokens program")
    parser.add_argument("--only", choices=["models", "tokenizers", "errors", "export"])
    args, src, work = parse_with_dirs(parser)
    fail = Failures()
    tools = args
    if args.only in (None, "errors"):
        check_errors(fail, args.probe, work)
    if args.only in (None, "models"):
        check_models(fail, args.probe, src, work)
    if args.only in (None, "export"):
        check_exported_model(fail, tools, src, work)
        check_exported_tokenizer(fail, tools, src, work)
    if args.only in (None, "tokenizers"):
        check_tokenizers(fail, args.tokenize, args.chat_tool, src, work)
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
