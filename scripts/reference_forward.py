#!/usr/bin/env python3
"""An independent float64 forward pass of the LLaMA-family decoders, written from Hugging Face
transformers' modeling code (modeling_llama.py, modeling_qwen2.py, modeling_qwen3.py,
modeling_mistral.py), for checking kuiper where torch cannot be installed.

It reads an HF model directory (config.json + model.safetensors) and follows the HF layout
literally: rotate-half RoPE on the un-permuted q/k projections, biases where the config or the
family has them, Qwen3's per-head RMSNorm of q and k before RoPE, Mistral's sliding window.

    python3 scripts/reference_forward.py DIR --tokens 1,5,9 [--greedy 32]
prints the last position's top logits (and a greedy continuation); `import reference_forward`
gives `Model(dir).logits(tokens)` → float64 [len(tokens), vocab] (`Model.from_tensors` for
weights that come from elsewhere, such as a GGUF file).
"""
import argparse
import json
import math
import os

import numpy as np
from safetensors.numpy import load_file

FAMILIES = {  # architectures entry → what differs from LLaMA (None: as the config says)
    "LlamaForCausalLM": dict(qkv_bias=None, qk_norm=False),
    "MistralForCausalLM": dict(qkv_bias=False, qk_norm=False),
    "Qwen2ForCausalLM": dict(qkv_bias=True, qk_norm=False),
    "Qwen3ForCausalLM": dict(qkv_bias=None, qk_norm=True),
}


def rms_norm(x, weight, eps):
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight.
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope_parameters(config):
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def inverse_frequencies(config, head_dim):
    """_compute_default_rope_parameters and _compute_llama3_parameters of transformers."""
    params = rope_parameters(config)
    inv = 1.0 / (params["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    kind = params["rope_type"]
    if kind == "default":
        return inv
    if kind != "llama3":
        raise SystemExit(f"rope_type {kind} is not in this reference")
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old = params["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


class Model:
    """`Model(dir)` reads an HF model directory; `Model.from_tensors(config, weights)` takes a
    config.json dict and HF-named tensors in HF layout (e.g. dequantized from another file)."""

    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            config = json.load(f)
        self._setup(config, load_file(os.path.join(directory, "model.safetensors")))

    @classmethod
    def from_tensors(cls, config, weights):
        model = cls.__new__(cls)
        model._setup(config, weights)
        return model

    def _setup(self, config, weights):
        self.config = c = config
        arch = c["architectures"][0]
        if arch not in FAMILIES:
            raise SystemExit(f"{arch} is not in this reference")
        family = FAMILIES[arch]
        self.weights = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        self.dim = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.dim // self.heads
        self.layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        # Qwen2 always has q/k/v biases; LLaMA has them (and on o_proj) when attention_bias.
        self.qkv_bias = family["qkv_bias"] if family["qkv_bias"] is not None else c.get("attention_bias", False)
        self.o_bias = arch == "LlamaForCausalLM" and c.get("attention_bias", False)
        self.mlp_bias = arch == "LlamaForCausalLM" and c.get("mlp_bias", False)
        self.qk_norm = family["qk_norm"]
        # Mistral: sliding_window applies to every layer when set; Qwen2/3 only with
        # use_sliding_window (layers from max_window_layers on; not in this reference).
        if arch.startswith("Qwen") and c.get("use_sliding_window", False):
            raise SystemExit("Qwen sliding-window layers are not in this reference")
        self.window = c.get("sliding_window") if arch == "MistralForCausalLM" else None
        self.inv_freq = inverse_frequencies(c, self.head_dim)
        tied = c.get("tie_word_embeddings", False)
        self.classifier = self.weights["model.embed_tokens.weight" if tied else "lm_head.weight"]

    def linear(self, x, name, bias):
        y = x @ self.weights[name + ".weight"].T
        return y + self.weights[name + ".bias"] if bias else y

    def attention(self, x, prefix, positions, cache):
        n = x.shape[0]
        q = self.linear(x, prefix + "q_proj", self.qkv_bias).reshape(n, self.heads, self.head_dim)
        k = self.linear(x, prefix + "k_proj", self.qkv_bias).reshape(n, self.kv_heads, self.head_dim)
        v = self.linear(x, prefix + "v_proj", self.qkv_bias).reshape(n, self.kv_heads, self.head_dim)
        if self.qk_norm:  # Qwen3: RMSNorm over each head's head_dim, before RoPE
            q = rms_norm(q, self.weights[prefix + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.weights[prefix + "k_norm.weight"], self.eps)
        freqs = np.outer(positions, self.inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:  # keys and values of the earlier positions, then these
            if prefix in cache:
                k = np.concatenate([cache[prefix][0], k])
                v = np.concatenate([cache[prefix][1], v])
            cache[prefix] = (k, v)
        key_positions = np.arange(k.shape[0])
        group = self.heads // self.kv_heads
        k = np.repeat(k, group, axis=1)  # repeat_kv: query head h reads kv head h // group
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
        allowed = key_positions[None, :] <= positions[:, None]
        if self.window:
            allowed &= positions[:, None] - key_positions[None, :] < self.window
        scores = np.where(allowed[None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.einsum("hqk,khd->qhd", probs, v).reshape(n, self.heads * self.head_dim)
        return self.linear(out, prefix + "o_proj", self.o_bias)

    def logits(self, tokens, cache=None):
        """Logits of `tokens`, which follow the positions already in `cache` (a dict filled by
        earlier calls; None: the tokens start the sequence and nothing is kept)."""
        w = self.weights
        start = cache.setdefault("length", 0) if cache is not None else 0
        positions = np.arange(start, start + len(tokens))
        x = w["model.embed_tokens.weight"][np.asarray(tokens)]
        for layer in range(self.layers):
            p = f"model.layers.{layer}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], self.eps)
            x = x + self.attention(h, p + "self_attn.", positions, cache)
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], self.eps)
            gate = self.linear(h, p + "mlp.gate_proj", self.mlp_bias)
            up = self.linear(h, p + "mlp.up_proj", self.mlp_bias)
            x = x + self.linear(silu(gate) * up, p + "mlp.down_proj", self.mlp_bias)
        x = rms_norm(x, w["model.norm.weight"], self.eps)
        if cache is not None:
            cache["length"] = start + len(tokens)
        return x @ self.classifier.T

    def greedy(self, prompt, steps, stop=()):
        """Argmax continuation (ending after a token in `stop`) and the top-2 margin of each step
        (small margins make ties). Each step reads only the new token, the rest from a cache."""
        cache, margins = {}, []
        tokens, step_input = list(prompt), list(prompt)
        for _ in range(steps):
            last = self.logits(step_input, cache)[-1]
            top2 = np.sort(last)[-2:]
            margins.append(float(top2[1] - top2[0]))
            tokens.append(int(np.argmax(last)))
            step_input = tokens[-1:]
            if tokens[-1] in stop:
                break
        return tokens[len(prompt):], margins


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--tokens", required=True, help="comma-separated prompt ids")
    parser.add_argument("--greedy", type=int, default=0, help="greedy steps to print")
    args = parser.parse_args()
    model = Model(args.directory)
    tokens = [int(t) for t in args.tokens.split(",")]
    last = model.logits(tokens)[-1]
    top = np.argsort(last)[::-1][:5]
    print("top logits:", ", ".join(f"{i}:{last[i]:.6f}" for i in top))
    if args.greedy:
        print("greedy:", model.greedy(tokens, args.greedy)[0])


if __name__ == "__main__":
    main()
