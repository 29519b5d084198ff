// What the command-line programs share: the model/tokenizer/sampling flags, loading a model
// with its tokenizer (checking that they fit each other), and reporting errors as one line.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "kuiper/checkpoint/load_checkpoint.h"
#include "kuiper/engine/engine.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/sampler/sampler.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper::cli {

struct ModelFlags {
  std::string model;      // empty = the bundled default model
  std::string tokenizer;  // empty = found next to the model
  std::string format = "auto";
  std::string device = "cpu";
  std::string dtype;      // empty = the device's default
  int group_size = 0;     // int8/int4 weights per scale when quantizing at load; 0 = as stored or the default
  std::string int4_scheme;  // "symmetric" or "min" when quantizing to int4 at load; empty = as stored or min
  int context = 0;        // 0 = the model's maximum
  bool check_tensors = false;  // scan the weights for NaN/Inf at load
  int tensor_parallel = 1;  // GPUs (CUDA) or threads (CPU) the model is split over
  SamplerConfig sampler{1.0f, 0.9f, 0, 0};
  std::optional<uint64_t> seed;
};

// Adds -m/-t/--format/--device/--dtype (alias --quant int8|int4)/--group-size/--int4-scheme/-c/--check-tensors/--tp
// and, when
// `sampling`, --temp/--top-p/--top-k/--min-p/--seed.
void add_model_flags(CLI::App& app, ModelFlags& flags, bool sampling = true);

struct LoadedModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<LlamaModel> model;
  std::string model_path, tokenizer_path, format;
};

// Loads the checkpoint and tokenizer named by the flags (or the defaults), checks that the
// tokenizer's vocabulary fits the model, and builds the model on the requested device.
StatusOr<LoadedModel> load_model(const ModelFlags& flags);

// A tokenizer and an engine running the model (one generation path for every program).
struct LoadedEngine {
  std::unique_ptr<Tokenizer> tokenizer;  // declared first: the engine refers to it
  std::unique_ptr<Engine> engine;
  std::string model_path, tokenizer_path, format;
};
// As load_model, but the model runs inside an engine with `options`.
StatusOr<LoadedEngine> load_engine(const ModelFlags& flags, const EngineOptions& options);

// The flags' sampling (seed resolved as by sampler_config) for a request of max_tokens.
SamplingParams sampling_params(const ModelFlags& flags, int max_tokens);

// The model options the flags ask for (device, dtype, context, tensor parallelism).
StatusOr<ModelOptions> model_options(const ModelFlags& flags);
// The checkpoint quantized to int8/int4 when --dtype int8/int4 asks for it (with --group-size).
StatusOr<Checkpoint> quantize_if_asked(Checkpoint checkpoint, const ModelFlags& flags);

// Builds a model from a checkpoint on the device, in the dtype (quantizing to int8/int4 with the
// group size) and with the context the flags ask for.
StatusOr<std::unique_ptr<LlamaModel>> build_model(Checkpoint checkpoint, const ModelFlags& flags);

// The sampler configuration with the seed resolved (random when not given).
SamplerConfig sampler_config(const ModelFlags& flags);

// Refuses text given by `flag` that is not valid UTF-8, naming the first bad byte's offset: the
// byte-fallback tokenizers would encode it, and the model would continue from broken text.
Status check_utf8_flag(std::string_view flag, std::string_view text);

// Parses argv; on a bad flag prints one line and returns the exit code to use.
std::optional<int> parse_or_exit_code(CLI::App& app, int argc, char** argv);

// Prints "<program>: error: <message>" on stderr and returns the exit code 1.
int fail(const std::string& program, const Status& status);

}  // namespace kuiper::cli
