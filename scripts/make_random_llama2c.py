#!/usr/bin/env python3
"""Writes a LLaMA model of random weights in llama2.c's v0 format, of any shape: for server
tests that need a model slower than the bundled stories260K, and for benchmarks of the server
on the same shape `llama_bench --shape` builds in memory.

    make_random_llama2c.py --shape 768,2048,12,12,12,512 --seq-len 1024 out.bin

Shape: dim,hidden,layers,heads,kv_heads,vocab. Weights are uniform in +-1/sqrt(fan_in) (so the
activations stay in a realistic range), norms are 1, the classifier is the embedding. Pair the
file with a tokenizer of the same vocabulary (vocab 512: models/stories260K/tok512.bin)."""
import argparse
import struct

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", required=True, help="dim,hidden,layers,heads,kv_heads,vocab")
    parser.add_argument("--seq-len", type=int, default=1024, help="the model's context")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("out")
    args = parser.parse_args()
    dim, hidden, layers, heads, kv_heads, vocab = (int(v) for v in args.shape.split(","))
    if dim % heads or heads % kv_heads or min(dim, hidden, layers, heads, kv_heads, vocab, args.seq_len) < 1:
        parser.error(f"--shape {args.shape}: dim must divide by heads, heads by kv_heads, all positive")
    head_dim = dim // heads
    kv_dim = kv_heads * head_dim
    rng = np.random.default_rng(args.seed)

    with open(args.out, "wb") as f:
        f.write(struct.pack("7i", dim, hidden, layers, heads, kv_heads, vocab, args.seq_len))

        def write_matrix(rows, cols, count=1):
            bound = 1.0 / np.sqrt(cols)
            for _ in range(count):
                rng.uniform(-bound, bound, size=(rows, cols)).astype(np.float32).tofile(f)

        def write_ones(n):
            np.ones(n, dtype=np.float32).tofile(f)

        write_matrix(vocab, dim)                 # token embedding (and classifier)
        write_ones(layers * dim)                 # attention norms
        write_matrix(dim, dim, layers)           # wq
        write_matrix(kv_dim, dim, layers)        # wk
        write_matrix(kv_dim, dim, layers)        # wv
        write_matrix(dim, dim, layers)           # wo
        write_ones(layers * dim)                 # ffn norms
        write_matrix(hidden, dim, layers)        # w1
        write_matrix(dim, hidden, layers)        # w2
        write_matrix(hidden, dim, layers)        # w3
        write_ones(dim)                          # final norm
        np.zeros(args.seq_len * head_dim, dtype=np.float32).tofile(f)  # legacy RoPE tables (unused)


if __name__ == "__main__":
    main()
