// int8 checkpoint formats from other projects (llama2c_v2_checkpoint.cpp,
// kuiperllama_v3_checkpoint.cpp); listed in checkpoint.cpp's format table.
#pragma once

#include "kuiper/model/checkpoint.h"

namespace kuiper {

// llama2.c "version 2" (export.py --version 2, read by runq.c): "ak42" magic, 256-byte header
// with the group size, fp32 norms, then the int8 embedding and matrices.
const CheckpointFormat& llama2c_v2_format();

// KuiperLLama's int8 export (export.py --version 3): no magic, 8-int32 header ending with the
// group size; recognised only by its exact size, or forced with --format kuiper-v3.
const CheckpointFormat& kuiperllama_v3_format();

}  // namespace kuiper
