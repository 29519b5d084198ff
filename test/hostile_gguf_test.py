#!/usr/bin/env python3
"""Hostile numbers in GGUF files written by the `gguf` package (pip: gguf), and in a Hugging Face
config.json. Each case ends with one error line naming the file and the culprit, and a
non-zero exit.

  norms      a Q4_1 model (gguf's quantizer) whose norm weights hold NaN, +Inf or -Inf, run by
             llama_infer with every --dtype (as stored, fp32, fp16, bf16, int8, int4): exit 1,
             the tensor named; the same model with finite norms generates with every --dtype
  config     rope.freq_base and the RMS epsilon +Inf, NaN, negative or zero; block_count one
             short of or one beyond the 30 layers of tensors: checkpoint_probe refuses, naming
             the key
  hf config  rope_theta and rms_norm_eps beyond a float, negative or zero, num_hidden_layers
             one short of or one beyond the tensors' layers

Usage: hostile_gguf_test.py --probe build/test/checkpoint_probe --infer build/demo/llama_infer
                            [--source-dir .] [--work-dir D]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import sentencepiece
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_quant_reference import tiny_tensors  # noqa: E402
from gguf_reference import Failures, expect_one_line, parse_with_dirs, sentencepiece_writer, write_model  # noqa: E402

DTYPES = [[], ["--dtype", "fp32"], ["--dtype", "fp16"], ["--dtype", "bf16"], ["--dtype", "int8"],
          ["--dtype", "int4"]]


def tiny_config(layers, **overrides):
    config = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2}
    config.update(overrides)
    return config


def gguf_model(work, name, config, tensors, qtype, tokenizer=None):
    """The GGUF `name` of `tensors` with `config`'s metadata (write_model reads it from a directory)."""
    config_dir = os.path.join(work, name + "_config")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "config.json"), "w") as f:
        json.dump(config, f)
    return write_model(config_dir, "llama", qtype, os.path.join(work, name + ".gguf"), tensors, tokenizer=tokenizer)


def check_norms(fail, infer, src, work):
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(src, "models/stories260K/tok512.model"))
    config = tiny_config(2)
    good = tiny_tensors(np.random.default_rng(3), config)
    path = gguf_model(work, "q4_1", config, good, Q.Q4_1, sentencepiece_writer(sp))
    for dtype in DTYPES:
        r = subprocess.run([infer, "-m", path, "-n", "4", "--temp", "0", *dtype], capture_output=True, text=True,
                           timeout=120)
        fail.check(r.returncode == 0, f"Q4_1 model with finite norms generates with {dtype or 'its own dtype'}: "
                   f"exit {r.returncode} {r.stderr.strip()[-200:]}")
    for tensor, value, spelled in [("blk.1.attn_norm.weight", np.nan, "NaN"),
                                   ("output_norm.weight", np.inf, "+Inf"),
                                   ("blk.0.ffn_norm.weight", -np.inf, "-Inf")]:
        tensors = dict(good)
        tensors[tensor] = tensors[tensor].copy()
        tensors[tensor][5] = value
        path = gguf_model(work, f"q4_1_{spelled}", config, tensors, Q.Q4_1, sentencepiece_writer(sp))
        for dtype in DTYPES:
            r = subprocess.run([infer, "-m", path, "-n", "4", "--temp", "0", *dtype], capture_output=True,
                               text=True, timeout=120)
            lines = r.stderr.strip().splitlines()
            ok = (r.returncode == 1 and len(lines) == 1 and path in lines[0] and tensor in lines[0]
                  and spelled in lines[0] and "element 5" in lines[0])
            fail.check(ok, f"Q4_1 model with {spelled} in {tensor}, {dtype or 'its own dtype'}: exit {r.returncode}, "
                       f"{lines[-1] if lines else '(no message)'}")


def check_config(fail, probe, work):
    layers = 30
    config = tiny_config(layers, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=2)
    tensors = tiny_tensors(np.random.default_rng(5), config)
    path = gguf_model(work, "layers30", config, tensors, Q.F32)
    r = subprocess.run([probe, path, "--tokens", "1,2,3"], capture_output=True, text=True)
    fail.check(r.returncode == 0, f"the 30-layer model loads: {r.stderr.strip()[-200:]}")
    # write_model takes rope.freq_base from rope_theta, else from rope_parameters (so 0 can be written).
    cases = [(f"rope.freq_base {v}", {"rope_theta": None, "rope_parameters": {"rope_theta": v}},
              "'llama.rope.freq_base'") for v in (float("inf"), float("nan"), -10000.0, 0.0)]
    cases += [(f"rms epsilon {v}", {"rms_norm_eps": v}, "'llama.attention.layer_norm_rms_epsilon'")
              for v in (float("inf"), float("nan"), -1e-5, 0.0)]
    cases += [("block_count 29 for 30 layers", {"num_hidden_layers": layers - 1}, "'llama.block_count' is 29"),
              ("block_count 31 for 30 layers", {"num_hidden_layers": layers + 1}, "'llama.block_count' is 31")]
    for number, (name, overrides, expected) in enumerate(cases):
        bad = gguf_model(work, f"config{number}", dict(config, **overrides), tensors, Q.F32)
        expect_one_line(fail, probe, bad, name, expected)


def check_hf_config(fail, probe, src, work):
    fixture = os.path.join(src, "test/data/hf/llama2_tiny")  # 3 layers
    cases = [("rope_theta 1e300", ("rope_parameters", "rope_theta"), 1e300, "rope_theta is inf"),
             ("rope_theta -1", ("rope_parameters", "rope_theta"), -1.0, "rope_theta is -1"),
             ("rope_theta 0", ("rope_parameters", "rope_theta"), 0.0, "rope_theta is 0"),
             ("rms_norm_eps 1e300", ("rms_norm_eps",), 1e300, "rms_norm_eps is inf"),
             ("rms_norm_eps 0", ("rms_norm_eps",), 0.0, "rms_norm_eps is 0"),
             ("rms_norm_eps -1e-5", ("rms_norm_eps",), -1e-5, "rms_norm_eps is -0.000010"),
             ("num_hidden_layers 2 for 3 layers", ("num_hidden_layers",), 2, "num_hidden_layers in config.json is 2"),
             ("num_hidden_layers 4 for 3 layers", ("num_hidden_layers",), 4, "num_hidden_layers in config.json is 4")]
    for number, (name, keys, value, expected) in enumerate(cases):
        model = os.path.join(work, f"hf{number}")
        shutil.copytree(fixture, model, dirs_exist_ok=True)
        with open(os.path.join(model, "config.json")) as f:
            config = json.load(f)
        where = config
        for key in keys[:-1]:
            where = where[key]
        where[keys[-1]] = value
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        expect_one_line(fail, probe, model, name, expected)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--infer", required=True)
    args, src, work = parse_with_dirs(parser)
    fail = Failures()
    check_norms(fail, args.infer, src, work)
    check_config(fail, args.probe, work)
    check_hf_config(fail, args.probe, src, work)
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
