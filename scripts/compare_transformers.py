#!/usr/bin/env python3
"""kuiper vs Hugging Face transformers on the same GPU, same model shape, random bf16 weights.

Runs build/demo/llama_bench for each shape, then times transformers' LlamaForCausalLM
(greedy generate for decode, one forward pass for prefill) in this process, and prints a
table with the ratios. Decode is timed twice: with generate's default dynamic cache (each step
runs eagerly) and with cache_implementation="static" (transformers 5 then compiles the decode
step with torch.compile, which is much faster). Needs torch + transformers (present on the GPU
machine).
    scripts/compare_transformers.py --bench build/demo/llama_bench --shapes llama2-7b llama3-8b
"""
import argparse
import re
import statistics
import subprocess
import sys
import time

SHAPES = {  # dim, hidden, layers, heads, kv heads, vocab, rope theta
    "llama2-7b": (4096, 11008, 32, 32, 32, 32000, 10000.0),
    "llama3-8b": (4096, 14336, 32, 32, 8, 128256, 500000.0),
}


def run_kuiper(bench, shape, contexts, prompt):
    cmd = [bench, "--shape", shape, "--device", "cuda", "--dtype", "bf16", "--prompt", str(prompt),
           "--decode", "64", "--contexts", ",".join(map(str, contexts))]
    out = subprocess.run(cmd, capture_output=True, text=True)
    print(out.stdout, out.stderr, sep="", flush=True)
    if out.returncode != 0:
        sys.exit(f"llama_bench failed for {shape}")
    return {k: float(v) for k, v in re.findall(r"^RESULT (\S+) (\S+)$", out.stdout, re.M)}


def time_cuda(torch, fn, repeats):
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_model(shape):
    """transformers' LlamaForCausalLM of a named shape with random bf16 weights, on the GPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dim, hidden, layers, heads, kv, vocab, theta = SHAPES[shape]
    config = LlamaConfig(hidden_size=dim, intermediate_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                         max_position_embeddings=4096, rope_theta=theta, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def run_transformers(shape, prompt_len):
    import torch

    vocab = SHAPES[shape][5]
    model = random_model(shape)
    ids = torch.randint(0, vocab, (1, 16), device="cuda")
    prompt = torch.randint(0, vocab, (1, prompt_len), device="cuda")

    def decode_rate(**cache):
        def generate(n):
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **cache)
        generate(8)  # warm-up (and, for the static cache, compilation)
        t_long = time_cuda(torch, lambda: generate(144), 3)
        t_short = time_cuda(torch, lambda: generate(16), 3)
        return 128 / (t_long - t_short)

    with torch.inference_mode():
        decode = decode_rate()
        model(prompt)
        prefill = prompt_len / time_cuda(torch, lambda: model(prompt), 5)
        decode_static = decode_rate(cache_implementation="static")  # last: it compiles
    peak = torch.cuda.max_memory_allocated() / 1e9
    del model
    torch.cuda.empty_cache()
    return {"decode_128": decode, "decode_static": decode_static, "prefill": prefill, "peak_gb": peak, "versions": (torch.__version__,)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", default="build/demo/llama_bench")
    parser.add_argument("--shapes", nargs="+", default=["llama2-7b", "llama3-8b"])
    parser.add_argument("--prompt", type=int, default=512)
    args = parser.parse_args()
    import torch
    import transformers

    rows = []
    for shape in args.shapes:
        k = run_kuiper(args.bench, shape, [128, 1024, 4096], args.prompt)
        h = run_transformers(shape, args.prompt)
        rows.append((shape, k, h))
    print(f"\ntransformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("HF decode: eager with the dynamic cache; HF static: static cache, step compiled")
    print(f"{'shape':<11} {'kuiper decode@128':>18} {'@1024':>8} {'@4096':>8} {'HF decode':>10} {'ratio':>6} "
          f"{'HF static':>10} {'ratio':>6} {'kuiper prefill':>15} {'HF prefill':>11} {'ratio':>6}")
    for shape, k, h in rows:
        p = f"prefill_{args.prompt}"
        print(f"{shape:<11} {k['decode_128']:>18.1f} {k['decode_1024']:>8.1f} {k['decode_4096']:>8.1f} "
              f"{h['decode_128']:>10.1f} {k['decode_128'] / h['decode_128']:>6.2f} "
              f"{h['decode_static']:>10.1f} {k['decode_128'] / h['decode_static']:>6.2f} "
              f"{k[p]:>15.0f} {h['prefill']:>11.0f} {k[p] / h['prefill']:>6.2f}")


if __name__ == "__main__":
    main()
