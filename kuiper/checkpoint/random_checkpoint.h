// A checkpoint of random weights of any shape, built in memory: benchmarks measure real model
// shapes without multi-gigabyte files, and tests get models of awkward shapes.
#pragma once

#include <cstdint>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

// Weights uniform in ±1/sqrt(fan_in) (so activations stay in a realistic range), norms near 1,
// stored as `dtype` (fp32, fp16 or bf16). Deterministic for a given seed.
StatusOr<Checkpoint> make_random_checkpoint(const LlamaConfig& config, uint64_t seed,
                                            DataType dtype = DataType::kFP32);

}  // namespace kuiper
