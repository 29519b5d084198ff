#!/usr/bin/env python3
"""Batched decode: kuiper's engine vs transformers' batched greedy generate on the same GPU.

Same model shape, random bf16 weights, B sequences decoding together. kuiper's figures come from
`llama_bench --batch` (RESULT lines); transformers runs `generate` on B prompts of equal length
with a static cache (its decode step compiled by torch.compile, the fastest transformers offers
without extra libraries). Output tokens/s = B x the extra tokens of a long run over a short one,
divided by the extra time, so that prefill and compilation drop out. Needs torch + transformers
(present on the GPU machine).
    scripts/compare_transformers_batched.py --bench build-gpu/demo/llama_bench --shape llama2-7b --batch 32
"""
import argparse
import re
import statistics
import subprocess
import sys
import time

from compare_transformers import SHAPES, random_model


def run_kuiper(bench, shape, batch, prompt):
    cmd = [bench, "--shape", shape, "--device", "cuda", "--dtype", "bf16", "--batch", str(batch),
           "--contexts", str(prompt)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    print(out.stdout, out.stderr, sep="", flush=True)
    if out.returncode != 0:
        sys.exit(f"llama_bench failed for {shape}")
    return {k: float(v) for k, v in re.findall(r"^RESULT (\S+) (\S+)$", out.stdout, re.M)}


def run_transformers(shape, batch, prompt_len, short, long):
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopAfter(StoppingCriteria):
        """Ends generation after n new tokens. Every call asks for `long` tokens, so the static
        cache (sized by max_new_tokens) keeps one shape and the compiled step is reused."""

        def __init__(self, n):
            self.end = prompt_len + n

        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.end, dtype=torch.bool,
                              device=input_ids.device)

    vocab = SHAPES[shape][5]
    model = random_model(shape)
    prompts = torch.randint(0, vocab, (batch, prompt_len), device="cuda")
    mask = torch.ones_like(prompts)

    def seconds(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(prompts, attention_mask=mask, max_new_tokens=long, min_new_tokens=n, do_sample=False,
                             pad_token_id=0, cache_implementation="static",
                             stopping_criteria=StoppingCriteriaList([StopAfter(n)]))
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if out.shape[1] != prompt_len + n:
            sys.exit(f"transformers generated {out.shape[1] - prompt_len} tokens, asked for {n}")
        print(f"transformers: {n} tokens in {elapsed:.2f} s", flush=True)
        return elapsed

    with torch.inference_mode():
        seconds(short)  # warm-up and compilation
        t_long = statistics.median(seconds(long) for _ in range(2))
        t_short = statistics.median(seconds(short) for _ in range(2))
    peak = torch.cuda.max_memory_allocated() / 1e9
    del model
    torch.cuda.empty_cache()
    return batch * (long - short) / (t_long - t_short), peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", default="build/demo/llama_bench")
    parser.add_argument("--shape", default="llama2-7b", choices=SHAPES)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=512)
    args = parser.parse_args()
    import torch
    import transformers

    k = run_kuiper(args.bench, args.shape, args.batch, args.prompt)
    hf, peak = run_transformers(args.shape, args.batch, args.prompt, 16, 112)
    key = next((name for name in k if name.startswith(f"batch_decode_{args.batch}")), None)
    print(f"\ntransformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{args.shape}, {args.batch} sequences, prompt {args.prompt}, greedy, bf16")
    print(f"transformers generate (static cache, compiled): {hf:10.1f} output tok/s  (peak {peak:.1f} GB)")
    if key is None:
        sys.exit("llama_bench printed no batch_decode result")
    print(f"kuiper engine ({key}):{'':>14}{k[key]:10.1f} output tok/s  ratio {k[key] / hf:.2f}")


if __name__ == "__main__":
    main()
