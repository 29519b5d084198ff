#!/usr/bin/env python3
"""Creates tiny random-weight Hugging Face directories of the LLaMA-family architectures that are
not LlamaForCausalLM-with-defaults (Qwen2, Qwen3, Mistral with a sliding window, LLaMA with
attention/MLP biases) under test/data/hf/, with reference outputs from the float64 NumPy forward
pass in reference_forward.py, in the reference.json layout of make_hf_fixtures.py.

    python3 scripts/make_family_fixtures.py --out test/data/hf
    python3 scripts/make_family_fixtures.py --out test/data/hf --check-transformers
The second form (where torch + transformers are installed: the GPU machine) also loads every
directory with transformers' AutoModelForCausalLM in fp32 and reports its logits' relative
error against the NumPy reference, and whether its greedy tokens agree.
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_forward  # noqa: E402

PROMPT_LENGTH = 16
NEW_TOKENS = 32


def qwen2_like():
    # Qwen2/2.5: q/k/v biases (o_proj none), tied embeddings, θ 1e6, eps 1e-6, GQA 2:1.
    return dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=288,
                hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                use_sliding_window=False, sliding_window=None, max_window_layers=2,
                bos_token_id=1, eos_token_id=2, hidden_act="silu", torch_dtype="float32")


def qwen3_like():
    # Qwen3: RMSNorm of each q and k head before RoPE, head_dim (24) not hidden/heads (16),
    # no biases, separate classifier, GQA 3:1.
    return dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=300,
                hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                num_attention_heads=6, num_key_value_heads=2, head_dim=24,
                max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
                tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                sliding_window=None, max_window_layers=2, bos_token_id=1, eos_token_id=2,
                hidden_act="silu", torch_dtype="float32")


def mistral_like():
    # Mistral: the LLaMA layout with a sliding window shorter than prompt + continuation
    # (16 + 32 tokens), so positions past it attend to the window only.
    return dict(architectures=["MistralForCausalLM"], model_type="mistral", vocab_size=320,
                hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                sliding_window=20, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                hidden_act="silu", torch_dtype="float32")


def llama_bias_like():
    # LlamaForCausalLM with attention_bias (q, k, v and o) and mlp_bias (gate, up, down).
    return dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=260,
                hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=True, mlp_bias=True,
                tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, hidden_act="silu",
                torch_dtype="float32")


def tensor_shapes(c):
    """Every tensor the HF model of config c holds, with its shape."""
    dim, hidden = c["hidden_size"], c["intermediate_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or dim // heads
    arch = c["architectures"][0]
    qkv_bias = arch == "Qwen2ForCausalLM" or c.get("attention_bias", False)
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], dim), "model.norm.weight": (dim,)}
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (c["vocab_size"], dim)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes[p + "input_layernorm.weight"] = (dim,)
        shapes[p + "post_attention_layernorm.weight"] = (dim,)
        for name, rows, cols in (("q_proj", heads * hd, dim), ("k_proj", kv * hd, dim),
                                 ("v_proj", kv * hd, dim), ("o_proj", dim, heads * hd)):
            shapes[p + f"self_attn.{name}.weight"] = (rows, cols)
            if qkv_bias and (name != "o_proj" or arch == "LlamaForCausalLM"):
                shapes[p + f"self_attn.{name}.bias"] = (rows,)
        if arch == "Qwen3ForCausalLM":
            shapes[p + "self_attn.q_norm.weight"] = (hd,)
            shapes[p + "self_attn.k_norm.weight"] = (hd,)
        for name, rows, cols in (("gate_proj", hidden, dim), ("up_proj", hidden, dim),
                                 ("down_proj", dim, hidden)):
            shapes[p + f"mlp.{name}.weight"] = (rows, cols)
            if c.get("mlp_bias", False):
                shapes[p + f"mlp.{name}.bias"] = (rows,)
    return shapes


def random_weights(c, seed):
    """A scale that keeps activations O(1) and logits well spread (HF's std-0.02 init gives
    near-uniform logits, where greedy ties would hide bugs); norm weights away from 1 so that a
    misplaced norm shows; biases large enough to matter."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in tensor_shapes(c).items():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w = 0.1 * rng.standard_normal(shape)
        elif "embed_tokens" in name:
            w = 0.3 * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[1])
        weights[name] = w.astype(np.float32)
    return weights


# Seeds chosen (of 100..129) for varied greedy tokens and top-2 margins of at least 0.03 (0.06
# for qwen2, whose tied classifier repeats tokens), so fp32 rounding cannot flip a step.
def build(name, config, seed, out_dir):
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(random_weights(config, seed), os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})
    model = reference_forward.Model(path)
    rng = np.random.default_rng(seed + 1)
    prompt = [config["bos_token_id"]] + rng.integers(3, config["vocab_size"], PROMPT_LENGTH - 1).tolist()
    greedy, margins = model.greedy(prompt, NEW_TOKENS)
    tokens = prompt + greedy
    logits = model.logits(tokens)
    reference = {
        "reference": "scripts/reference_forward.py (float64 NumPy)",
        "numpy_version": np.__version__,
        "seed": seed,
        "prompt": prompt,
        "tokens": tokens,
        "logits": [[float("%.9g" % v) for v in row] for row in logits.tolist()],
        "inv_freq": model.inv_freq.tolist(),
        "greedy": greedy,
        "greedy_top2_margins": margins,
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(reference, f)
    print(f"{name}: greedy {greedy}\n  min top-2 margin {min(margins):.4f}")
    return path, reference


def check_with_transformers(path, reference):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([reference["tokens"]])).logits[0].double().numpy()
        out = model.generate(torch.tensor([reference["prompt"]]), max_new_tokens=NEW_TOKENS,
                             do_sample=False, eos_token_id=None, pad_token_id=0,
                             attention_mask=torch.ones(1, len(reference["prompt"]), dtype=torch.long))
    want = np.array(reference["logits"])
    error = np.linalg.norm(logits - want) / np.linalg.norm(want)
    same = out[0, len(reference["prompt"]):].tolist() == reference["greedy"]
    print(f"  transformers {type(model).__name__}: logits relative error {error:.3g}, "
          f"greedy {'identical' if same else 'DIFFERENT'}")
    return error < 1e-5 and same


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to create the fixtures in")
    parser.add_argument("--check-transformers", action="store_true")
    args = parser.parse_args()
    ok = True
    for name, config, seed in (("qwen2_tiny", qwen2_like(), 110), ("qwen3_tiny", qwen3_like(), 107),
                               ("mistral_tiny", mistral_like(), 107),
                               ("llama_bias_tiny", llama_bias_like(), 120)):
        path, reference = build(name, config, seed, args.out)
        if args.check_transformers:
            ok &= check_with_transformers(path, reference)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
