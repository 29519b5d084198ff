// Writes a checkpoint as a llama2.c v1 file (fp32), the format llama2.c's run.c and kuiper
// both read. Used by the export tool and by tests that need files of arbitrary shapes.
#pragma once

#include <string>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// Writes to `path` via a temporary file renamed at the end, so a failure never leaves a
// half-written file under the final name. Weights of any float dtype are widened to fp32.
Status save_llama2c_v1(const Checkpoint& checkpoint, const std::string& path);

}  // namespace kuiper
