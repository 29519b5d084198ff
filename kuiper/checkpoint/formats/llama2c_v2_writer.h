// Writes an int8 checkpoint as a llama2.c version 2 file (the layout runq.c reads; see
// llama2c_v2_checkpoint.cpp). The checkpoint must already be int8 in one group size
// (convert_checkpoint), and that group size must divide dim and hidden_dim: runq.c multiplies
// whole groups per row, so other shapes would load there and compute garbage.
#pragma once

#include <string>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// OK when runq.c can run a model of `config` quantized in groups of `group_size`; the export
// tool asks before spending time quantizing.
Status check_llama2c_v2_group_size(const LlamaConfig& config, int group_size);

Status save_llama2c_v2(const Checkpoint& checkpoint, const std::string& path);

}  // namespace kuiper
