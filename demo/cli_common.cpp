#include "cli_common.h"

#include <charconv>
#include <filesystem>
#include <iostream>
#include <random>

#include "kuiper/base/regular_file.h"
#include "kuiper/checkpoint/check_tensors.h"
#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/model/int4_quantize.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/tokenizer/utf8.h"

namespace kuiper::cli {
namespace fs = std::filesystem;
namespace {

// The bundled default model lives in the source tree (KUIPER_MODELS_DIR, set by CMake).
std::string default_model_path() { return std::string(KUIPER_MODELS_DIR) + "/stories260K/stories260K.bin"; }

// The tokenizer that belongs to a model: a GGUF file's own metadata, else a known name in the
// model's directory, in the order load_tokenizer prefers them in a directory.
StatusOr<std::string> find_tokenizer(const std::string& model_path) {
  if (is_gguf_file(model_path)) return model_path;
  std::error_code unreachable;  // a path that cannot be examined holds no tokenizer
  const fs::path dir = fs::is_directory(model_path, unreachable) ? fs::path(model_path)
                                                                 : fs::path(model_path).parent_path();
  for (const char* name : {"tokenizer.model", "tokenizer.json", "tok512.model", "tokenizer.bin", "tok512.bin"}) {
    const fs::path candidate = dir / name;
    if (fs::exists(candidate, unreachable)) return candidate.string();
  }
  return not_found("no tokenizer found next to " + model_path + " (pass one with -t)");
}

StatusOr<DataType> parse_dtype(const std::string& name) {
  for (DataType d : {DataType::kFP32, DataType::kFP16, DataType::kBF16, DataType::kINT8, DataType::kINT4}) {
    if (name == dtype_name(d)) return d;
  }
  return invalid_argument("unknown dtype '" + name + "' (use fp32, fp16, bf16, int8 or int4)");
}

// Whole numbers 0..2^64-1 written in decimal digits alone: the conversion into uint64_t would
// wrap "-1" round to 2^64 - 1 and saturate what is beyond 2^64 - 1, both silently.
CLI::Validator seed_range() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (text.empty() || error != std::errc() || stop != end) {
          return "'" + text + "' is not a whole number in 0..18446744073709551615";
        }
        return "";
      },
      "0..2^64-1");
}

}  // namespace

void add_model_flags(CLI::App& app, ModelFlags& flags, bool sampling) {
  app.add_option("-m,--model", flags.model, "checkpoint file or model directory (default: bundled stories260K)");
  app.add_option("-t,--tokenizer", flags.tokenizer, "tokenizer file (default: found next to the model)");
  app.add_option("--format", flags.format, "checkpoint format (default: recognised from the file)")
      ->check(CLI::IsMember(checkpoint_format_names()));
  app.add_option("--device", flags.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", flags.dtype, "weight dtype: fp32, fp16, bf16, int8, int4 (default: as stored; fp32 runs as bf16 on cuda)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "int8", "int4"}));
  app.add_option_function<std::string>(
         "--quant", [&flags](const std::string& q) { if (q != "none") flags.dtype = q; },
         "int8/int4: same as --dtype int8/int4; none: weights as --dtype says")
      ->check(CLI::IsMember({"int8", "int4", "none"}));
  app.add_option("--group-size", flags.group_size, "int8/int4 weights per scale (default: as stored, or int8 64, int4 32)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--int4-scheme", flags.int4_scheme,
                 "int4 at load: min (scale and minimum per group) or symmetric (default: as stored, or min)")
      ->check(CLI::IsMember({"symmetric", "min"}));
  app.add_option("-c,--context", flags.context, "context length in tokens (default: the model's maximum, at most 4096)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_flag("--check-tensors", flags.check_tensors, "refuse weights holding NaN or Inf (reads the whole file)");
  app.add_option("--tp", flags.tensor_parallel,
                 "split the model over this many GPUs (cuda) or threads (cpu) by tensor parallelism")
      ->check(CLI::Range(1, 64));
  if (!sampling) return;
  app.add_option("--temp", flags.sampler.temperature, "sampling temperature, 0 = greedy")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-p", flags.sampler.top_p, "nucleus sampling mass in (0, 1]")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k", flags.sampler.top_k, "keep only the k most likely tokens, 0 = off")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--min-p", flags.sampler.min_p, "keep tokens at least this fraction as likely as the top one, 0 = off")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", flags.seed, "random seed, 0 to 18446744073709551615 (default: from the clock)")
      ->check(seed_range());
}

SamplerConfig sampler_config(const ModelFlags& flags) {
  SamplerConfig config = flags.sampler;
  config.seed = flags.seed ? *flags.seed : std::random_device{}();
  return config;
}

StatusOr<ModelOptions> model_options(const ModelFlags& flags) {
  ModelOptions options;
  options.device = flags.device == "cuda" ? DeviceType::kCUDA : DeviceType::kCPU;
  if (options.device == DeviceType::kCUDA && !cuda_available()) {
    return unsupported("--device cuda: " + cuda_unavailable_reason());
  }
  if (!flags.dtype.empty()) {
    KUIPER_ASSIGN_OR_RETURN(options.weight_dtype, parse_dtype(flags.dtype));
  }
  options.context = flags.context;
  options.tensor_parallel = flags.tensor_parallel;
  return options;
}

StatusOr<Checkpoint> quantize_if_asked(Checkpoint checkpoint, const ModelFlags& flags) {
  if (flags.dtype != "int8" && flags.dtype != "int4") return checkpoint;
  // Quantized here rather than by the model so that --group-size applies; matrices already
  // quantized so in that group size (and int4 scheme) are kept as stored.
  const DataType dtype = flags.dtype == "int8" ? DataType::kINT8 : DataType::kINT4;
  const op::Weight& stored = checkpoint.weights.layers.front().wq;
  const bool same = stored.dtype() == dtype;
  const int group = flags.group_size > 0 ? flags.group_size
                    : same ? stored.group_size
                    : dtype == DataType::kINT8 ? kDefaultInt8GroupSize : kDefaultInt4GroupSize;
  const bool with_min = !flags.int4_scheme.empty() ? flags.int4_scheme == "min" : !same || !stored.mins.is_empty();
  const Int4Scheme scheme = with_min ? Int4Scheme::kWithMin : Int4Scheme::kSymmetric;
  auto converted = convert_checkpoint(checkpoint, {dtype, group, scheme});
  if (!converted.ok()) return Status(converted.status().code(), checkpoint.path + ": " + converted.status().message());
  return converted;
}

StatusOr<std::unique_ptr<LlamaModel>> build_model(Checkpoint checkpoint, const ModelFlags& flags) {
  KUIPER_ASSIGN_OR_RETURN(ModelOptions options, model_options(flags));
  KUIPER_ASSIGN_OR_RETURN(checkpoint, quantize_if_asked(std::move(checkpoint), flags));
  return LlamaModel::create(checkpoint.config, checkpoint.weights, options);
}

namespace {

// The checkpoint and tokenizer named by the flags, checked against each other; fills the paths
// and format of `loaded`.
template <typename Loaded>
StatusOr<Checkpoint> load_checkpoint_and_tokenizer(const ModelFlags& flags, Loaded& loaded) {
  KUIPER_RETURN_IF_ERROR(validate(flags.sampler));
  loaded.model_path = flags.model.empty() ? default_model_path() : flags.model;
  // A directory is a Hugging Face model; anything else must be a regular file (a FIFO would hang
  // the tokenizer search and the loader), and a path that cannot be reached says why.
  std::error_code unreachable;
  if (!fs::is_directory(loaded.model_path, unreachable)) KUIPER_RETURN_IF_ERROR(check_regular_file(loaded.model_path));
  if (flags.tokenizer.empty()) {
    KUIPER_ASSIGN_OR_RETURN(loaded.tokenizer_path, find_tokenizer(loaded.model_path));
  } else {
    loaded.tokenizer_path = flags.tokenizer;
  }
  KUIPER_ASSIGN_OR_RETURN(Checkpoint checkpoint, load_checkpoint(loaded.model_path, {flags.format}));
  if (flags.check_tensors) KUIPER_RETURN_IF_ERROR(check_tensors_finite(checkpoint));
  KUIPER_ASSIGN_OR_RETURN(loaded.tokenizer, load_tokenizer(loaded.tokenizer_path));
  if (loaded.tokenizer->vocab_size() != checkpoint.config.vocab_size) {
    return invalid_argument("tokenizer " + loaded.tokenizer_path + " has " +
                            std::to_string(loaded.tokenizer->vocab_size()) + " tokens but the model " +
                            loaded.model_path + " expects " + std::to_string(checkpoint.config.vocab_size));
  }
  loaded.format = checkpoint.format;
  return checkpoint;
}

}  // namespace

StatusOr<LoadedModel> load_model(const ModelFlags& flags) {
  LoadedModel loaded;
  KUIPER_ASSIGN_OR_RETURN(Checkpoint checkpoint, load_checkpoint_and_tokenizer(flags, loaded));
  KUIPER_ASSIGN_OR_RETURN(loaded.model, build_model(std::move(checkpoint), flags));
  return loaded;
}

StatusOr<LoadedEngine> load_engine(const ModelFlags& flags, const EngineOptions& options) {
  LoadedEngine loaded;
  KUIPER_ASSIGN_OR_RETURN(Checkpoint checkpoint, load_checkpoint_and_tokenizer(flags, loaded));
  KUIPER_ASSIGN_OR_RETURN(ModelOptions model, model_options(flags));
  KUIPER_ASSIGN_OR_RETURN(checkpoint, quantize_if_asked(std::move(checkpoint), flags));
  KUIPER_ASSIGN_OR_RETURN(loaded.engine,
                          Engine::create(checkpoint.config, checkpoint.weights, model, *loaded.tokenizer, options));
  return loaded;
}

SamplingParams sampling_params(const ModelFlags& flags, int max_tokens) {
  const SamplerConfig config = sampler_config(flags);
  SamplingParams p;
  p.temperature = config.temperature;
  p.top_p = config.top_p;
  p.top_k = config.top_k;
  p.min_p = config.min_p;
  p.seed = config.seed;
  p.max_tokens = max_tokens;
  return p;
}

Status check_utf8_flag(std::string_view flag, std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    const size_t length = utf8::valid_char_length(text.substr(at));
    if (length == 0) {
      return invalid_argument(std::string(flag) + " is not valid UTF-8 (byte " + std::to_string(at) + " of " +
                              std::to_string(text.size()) + ")");
    }
    at += length;
  }
  return ok_status();
}

std::optional<int> parse_or_exit_code(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": error: " << e.what() << " (see --help)\n";
    return 2;
  }
  return std::nullopt;
}

int fail(const std::string& program, const Status& status) {
  std::cerr << program << ": error: " << status.message() << "\n";
  return 1;
}

}  // namespace kuiper::cli
