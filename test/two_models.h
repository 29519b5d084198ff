// Two models of different shapes and contexts alive in one process, decoding in turn: each
// must give exactly the logits it gives alone, which fails if kernels shared state between
// them (scratch, handles, a recorded graph reading another model's memory).
#pragma once

#include <vector>

#include "kuiper/model/llama_model.h"

namespace kuiper::test {

struct TwoModelsResult {
  double worst_difference = 0;  // largest |interleaved − alone| over every logit
  int steps = 0;
};

// Prefills a prompt into each model, then decodes `steps` greedy tokens from each, alternating
// the models token by token; compares with each model run on its own.
TwoModelsResult run_two_models_interleaved(const ModelOptions& options, int steps);

}  // namespace kuiper::test
