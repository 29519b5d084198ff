#!/usr/bin/env python3
"""Creates the tiny Hugging Face LLaMA fixtures under test/data/hf/ and transformers' reference
outputs for them, which test/test_hf_checkpoint.cpp compares kuiper against.

Runs where torch + transformers + safetensors are installed (the GPU machine); everything is
computed on the CPU in fp32 so the references carry no TF32 or kernel-choice noise.

    python3 scripts/make_hf_fixtures.py --out test/data/hf

Writes, per model directory: config.json, generation_config.json, model*.safetensors (and the
index for the sharded copy), reference.json = {versions, prompt, transformers' inverse RoPE
frequencies, greedy continuation, logits of every position of prompt + continuation}.
"""
import argparse
import json
import math
import os

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT_LENGTH = 16
NEW_TOKENS = 32


def llama2_like():
    # MHA, default RoPE with θ = 1e4, separate classifier, vocab a multiple of 64.
    return dict(vocab_size=320, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def llama3_like():
    # GQA 4:1 with two kv groups (so a wrong head-to-group mapping shows), θ = 5e5, llama3
    # scaling whose small original context puts one frequency of head_dim 16 in the smoothed
    # band and scales the slower ones, tied classifier, vocab 301 (not a multiple of 64).
    return dict(vocab_size=301, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 7],
                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64})


def randomise(model, seed):
    """Weights of a scale that keeps activations O(1) and logits well spread (HF's default
    init of std 0.02 gives near-uniform logits, where greedy ties would hide bugs). Norm weights
    are perturbed from 1 so that a norm applied in the wrong place shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))


def prompt_for(config, seed):
    gen = torch.Generator().manual_seed(seed)
    body = torch.randint(3, config.vocab_size, (PROMPT_LENGTH - 1,), generator=gen)
    return [config.bos_token_id] + body.tolist()


def manual_greedy(model, prompt):
    ids = list(prompt)
    margins = []
    for _ in range(NEW_TOKENS):
        logits = model(torch.tensor([ids])).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]))
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], margins


def hf_greedy(model, prompt):
    # No eos: the reference is 32 plain argmax steps, whatever tokens they hit.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                         attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


def build(name, spec, seed, out_dir, shard_size=None):
    torch.manual_seed(seed)
    config = LlamaConfig(**spec)
    model = LlamaForCausalLM(config).float().eval()
    randomise(model, seed)

    prompt = prompt_for(config, seed + 1)
    with torch.no_grad():
        manual, margins = manual_greedy(model, prompt)
        generated = hf_greedy(model, prompt)
        # Logits of every position of prompt + continuation: positions past the prompt test
        # RoPE further out than the prompt alone would.
        tokens = prompt + generated
        logits = model(torch.tensor([tokens])).logits[0].float()
    if generated != manual[:len(generated)]:
        raise SystemExit(f"{name}: generate() and the argmax loop disagree: {generated} vs {manual}")
    if len(generated) != NEW_TOKENS:
        raise SystemExit(f"{name}: generate() stopped after {len(generated)} tokens")

    inv_freq = model.model.rotary_emb.inv_freq.float().tolist()
    path = os.path.join(out_dir, name)
    model.save_pretrained(path)
    reference = {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "seed": seed,
        "prompt": prompt,
        "tokens": tokens,
        # 9 significant digits round-trip fp32 exactly.
        "logits": [[float("%.9g" % v) for v in row] for row in logits.tolist()],
        "inv_freq": inv_freq,
        "greedy": generated,
        "greedy_top2_margins": margins,
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(reference, f)
    if shard_size:
        model.save_pretrained(path + "_sharded", max_shard_size=shard_size)
    print(f"{name}: prompt {prompt}\n  greedy {generated}\n  min top-2 margin {min(margins):.4f}"
          f"\n  inv_freq {inv_freq}\n  files {sorted(os.listdir(path))}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to create the fixtures in")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(4)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    build("llama2_tiny", llama2_like(), seed=1234, out_dir=args.out, shard_size="300KB")
    build("llama3_tiny", llama3_like(), seed=5678, out_dir=args.out)
    for root, _, files in sorted(os.walk(args.out)):
        for f in sorted(files):
            print(f"{os.path.getsize(os.path.join(root, f)):>9}  {os.path.join(root, f)}")


if __name__ == "__main__":
    main()
