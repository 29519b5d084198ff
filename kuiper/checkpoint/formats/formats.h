// Every checkpoint format kuiper reads, one file (or pair) each in this folder; the registry
// (load_checkpoint.cpp) lists them in the order detection tries them.
#pragma once

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// llama2.c fp32 checkpoints: the legacy 7-int header (v0) and the "ak42" version 1 (llama2c.cpp).
const CheckpointFormat& llama2c_v0_format();
const CheckpointFormat& llama2c_v1_format();
// llama2.c "version 2" (export.py --version 2, read by runq.c): "ak42" magic, 256-byte header
// with the group size, fp32 norms, then the int8 embedding and matrices (llama2c_v2.cpp).
const CheckpointFormat& llama2c_v2_format();
// KuiperLLama's int8 export (export.py --version 3): no magic, 8-int32 header ending with the
// group size; recognised only by its exact size, or forced with --format kuiperllama-v3
// (kuiperllama_v3.cpp).
const CheckpointFormat& kuiperllama_v3_format();
// A Hugging Face model directory or one of its safetensors files (hf_safetensors.cpp).
const CheckpointFormat& hf_safetensors_format();
// kuiper's own: safetensors with the config and quantization in its metadata (kuiper_format.cpp).
const CheckpointFormat& kuiper_format();
// llama.cpp's GGUF: llama, qwen2 and qwen3 models in F32, F16, BF16 or Q8_0 (gguf.cpp).
const CheckpointFormat& gguf_format();

}  // namespace kuiper
