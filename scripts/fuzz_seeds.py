#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz harness (test/fuzz, run by scripts/fuzz.sh) into
OUT/<harness>/: tiny models in each llama2.c/KuiperLLama layout and as Hugging Face directories,
the test data's configs, tokenizers cut down to a few hundred entries, and text. Seeds are kept
small on purpose: the fuzzer mutates every byte alike, and a 1 MB model would be mostly weights.
The kuiper-format seeds are written by kuiper_export (scripts/fuzz.sh), not here.

Usage: fuzz_seeds.py OUT"""
import glob
import gzip
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# dim, hidden, layers, heads, kv_heads, vocab, seq: the smallest shape every reader accepts.
DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ = 8, 16, 1, 2, 1, 16, 8
HEAD_DIM = DIM // HEADS
KV_DIM = KV_HEADS * HEAD_DIM
GROUP = 8


def floats(n, scale=0.1):
    return struct.pack(f"<{n}f", *[scale * ((i * 7919) % 13 - 6) for i in range(n)])


def int8_matrix(rows, cols):
    n = rows * cols
    return bytes((i * 37) % 255 - 127 & 0xFF for i in range(n)) + struct.pack(f"<{n // GROUP}f", *[0.01] * (n // GROUP))


# (name, rows, cols) of the layer matrices in file order.
MATRICES = [("wq", DIM, DIM), ("wk", KV_DIM, DIM), ("wv", KV_DIM, DIM), ("wo", DIM, DIM),
            ("w1", HIDDEN, DIM), ("w2", DIM, HIDDEN), ("w3", HIDDEN, DIM)]


def dims(vocab):
    return struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, vocab, SEQ)


def llama2c_v0(shared):
    body = floats(VOCAB * DIM) + floats(LAYERS * DIM, 1.0)
    body += b"".join(floats(LAYERS * r * c) for _, r, c in MATRICES[:4]) + floats(LAYERS * DIM, 1.0)
    body += b"".join(floats(LAYERS * r * c) for _, r, c in MATRICES[4:]) + floats(DIM, 1.0)
    body += floats(SEQ * HEAD_DIM)  # the legacy RoPE tables
    return dims(VOCAB if shared else -VOCAB) + body + (b"" if shared else floats(VOCAB * DIM))


def llama2c_header(version):
    header = struct.pack("<Ii", 0x616B3432, version) + dims(VOCAB) + b"\x01"
    if version == 2:
        header += struct.pack("<i", GROUP)
    return header + bytes(256 - len(header))


def llama2c_v1():
    norms = floats(LAYERS * DIM, 1.0) * 2 + floats(DIM, 1.0)
    return llama2c_header(1) + norms + floats(VOCAB * DIM) + b"".join(floats(LAYERS * r * c) for _, r, c in MATRICES)


def llama2c_v2():
    norms = floats(LAYERS * DIM, 1.0) * 2 + floats(DIM, 1.0)
    matrices = b"".join(int8_matrix(r, c) for _, r, c in MATRICES for _ in range(LAYERS))
    return llama2c_header(2) + norms + int8_matrix(VOCAB, DIM) + matrices


def kuiperllama_v3(shared):
    header = dims(VOCAB if shared else -VOCAB) + struct.pack("<i", GROUP)
    matrices = b"".join(int8_matrix(r, c) for _, r, c in MATRICES for _ in range(LAYERS))
    classifier = b"" if shared else int8_matrix(VOCAB, DIM)
    return header + matrices + classifier + floats(VOCAB * DIM) + floats(LAYERS * DIM, 1.0) * 2 + floats(DIM, 1.0)


def safetensors(tensors):
    header, data = {}, b""
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        blob = floats(n)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def hf_directory(config_path):
    config = json.load(open(config_path))
    config.update(hidden_size=DIM, intermediate_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, vocab_size=VOCAB, max_position_embeddings=SEQ, head_dim=HEAD_DIM,
                  tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    tensors = [("model.embed_tokens.weight", [VOCAB, DIM]), ("model.norm.weight", [DIM]), ("lm_head.weight", [VOCAB, DIM])]
    hf = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj", "wo": "self_attn.o_proj",
          "w1": "mlp.gate_proj", "w2": "mlp.down_proj", "w3": "mlp.up_proj"}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        tensors += [(prefix + "input_layernorm.weight", [DIM]), (prefix + "post_attention_layernorm.weight", [DIM])]
        tensors += [(prefix + hf[name] + ".weight", [r, c]) for name, r, c in MATRICES]
    return json.dumps(config).encode(), safetensors(tensors)


def small_tokenizer_json():
    with gzip.open(os.path.join(ROOT, "test/data/tokenizers/phi-3-mini.tokenizer.json.gz")) as f:
        tokenizer = json.load(f)
    model = tokenizer["model"]
    model["vocab"] = {text: i for text, i in model["vocab"].items() if i < 400}
    vocab = model["vocab"]
    model["merges"] = [m for m in model["merges"]
                       if all(part in vocab for part in m.split(" ")) and m.replace(" ", "") in vocab]
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["id"] < 400]
    return json.dumps(tokenizer, ensure_ascii=False).encode()


def text_seeds():
    with open(os.path.join(ROOT, "test/data/tokenizer_corpus.txt"), "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l][:40]
    return lines + [b"<|begin_of_text|>Hi<|eot_id|>", b"[INST] hi [/INST]", b"a\xff\xfeb", b"\xe2\x96\x81x"]


def main():
    out = sys.argv[1]
    seeds = {
        "fuzz_checkpoint_llama2c_v0": [llama2c_v0(True), llama2c_v0(False)],
        "fuzz_checkpoint_llama2c_v1": [llama2c_v1()],
        "fuzz_checkpoint_llama2c_v2": [llama2c_v2()],
        "fuzz_checkpoint_kuiperllama_v3": [kuiperllama_v3(True), kuiperllama_v3(False)],
        "fuzz_hf_config": [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(ROOT, "test/data/hf/*/config.json")))],
        "fuzz_tokenizer_file_sentencepiece": [open(os.path.join(ROOT, "models/stories260K/tok512.model"), "rb").read()],
        "fuzz_tokenizer_file_llama2c": [open(os.path.join(ROOT, "models/stories260K/tok512.bin"), "rb").read()],
        "fuzz_tokenizer_file_tiktoken":
            [b"".join(open(os.path.join(ROOT, "models/tokenizers/llama3/tokenizer.model"), "rb").readlines()[:400])],
        "fuzz_tokenizer_file_hf_bpe": [small_tokenizer_json()],
        "fuzz_chat_template": [bytes([len(t) % 7]) + t for t in text_seeds()],
    }
    configs = sorted(glob.glob(os.path.join(ROOT, "test/data/hf/*/config.json")))
    directories = [hf_directory(p) for p in configs]
    seeds["fuzz_hf_directory"] = [config + b"\0" + weights for config, weights in directories]
    seeds["fuzz_safetensors_header"] = [weights for _, weights in directories[:1]]
    for kind in ("sentencepiece", "llama2c", "tiktoken", "hf_bpe"):
        seeds[f"fuzz_tokenizer_text_{kind}"] = text_seeds()
    for harness, inputs in seeds.items():
        os.makedirs(os.path.join(out, harness), exist_ok=True)
        for i, data in enumerate(inputs):
            with open(os.path.join(out, harness, f"seed-{i}"), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
