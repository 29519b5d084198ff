// llama_bench --batch: aggregate decode speed of several sequences running together in the
// engine, and the batched roofline ratio: the bytes one step must read (the weights once, and
// every sequence's keys and values) over the step time, against the copy bandwidth measured in
// the same run.
#pragma once

#include <memory>
#include <vector>

#include "kuiper/engine/engine.h"

namespace kuiper::cli {

struct BatchBenchOptions {
  std::vector<int> batches;  // sequences decoding together
  std::vector<int> fills;    // prompt length of each sequence: the context decode starts at
  int decode_tokens = 64;    // timed steps
  int repeats = 3;           // measurements per figure (the median is reported)
  double copy_gbs = 0;       // read+write bandwidth of a large copy on the model's device
};

// Engine options that fit the benchmark: max(batches) sequences of max(fills) + decode tokens.
EngineOptions batch_bench_engine_options(const BatchBenchOptions& options);
// A context long enough for every measurement.
int batch_bench_context(const BatchBenchOptions& options);

// Prints one line and a RESULT line per (fill, batch): batch_decode_<B>_ctx<fill> in output
// tokens/s, batch_roofline_<B>_ctx<fill> as a fraction of the copy bandwidth.
Status run_batch_bench(Engine& engine, const BatchBenchOptions& options);

// A tokenizer for random-weight models: token i is written "<i>"; nothing ends generation.
std::unique_ptr<Tokenizer> numbered_tokenizer(int vocab_size);

}  // namespace kuiper::cli
