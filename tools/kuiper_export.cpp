// kuiper_export: re-store a checkpoint, quantized to int8 or int4 or in a float dtype.
//   kuiper_export model.bin model-int8.kuiper --quant int8            # kuiper format, groups of 64
//   kuiper_export model.bin model-int4.kuiper --quant int4            # kuiper format v3, groups of 32
//   kuiper_export model.bin model-int4.kuiper --quant int4 --gptq     # GPTQ on text the model writes
//   kuiper_export model.bin model-int4.kuiper --quant int4 --calibration text.txt   # GPTQ on this text
//   kuiper_export model.bin model-q80.bin --quant int8 --out-format llama2c-v2 --group-size 32
//   kuiper_export hf_model_dir/ model-bf16.kuiper --quant none --dtype bf16
//   kuiper_export hf_model_dir/ model-q8_0.gguf --out-format gguf           # llama.cpp's GGUF, Q8_0
// Reads every format load_checkpoint reads. The output is written as OUT.partial and renamed
// when complete; an error or Ctrl-C removes the partial file, so OUT is either whole or absent.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "demo/guarded_main.h"
#include "kuiper/checkpoint/check_tensors.h"
#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/checkpoint/load_checkpoint.h"
#include "kuiper/checkpoint/formats/gguf_export.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/checkpoint/formats/kuiper_format.h"
#include "kuiper/checkpoint/formats/llama2c_v2_writer.h"
#include "kuiper/model/calibration_inputs.h"
#include "kuiper/model/calibration_text.h"
#include "kuiper/model/int4_quantize.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/base/partial_file.h"
#include "kuiper/base/regular_file.h"
#include "kuiper/tokenizer/tokenizer.h"
#include "kuiper/generation/chat_template_choice.h"

namespace kuiper {
namespace {

// The partial output file, for the signal handler (which may only call async-signal-safe
// functions, so the path is kept as a plain C string).
char g_partial_path[4096];

extern "C" void remove_partial_and_exit(int signal_number) {
  unlink(g_partial_path);
  _exit(128 + signal_number);
}

void install_interrupt_cleanup(const std::string& out_path) {
  const std::string partial = PartialFile::partial_path(out_path);
  std::snprintf(g_partial_path, sizeof(g_partial_path), "%s", partial.c_str());
  std::signal(SIGINT, remove_partial_and_exit);
  std::signal(SIGTERM, remove_partial_and_exit);
}

// Calibration of int4 files: tokens the model writes itself (or reads from --calibration), in
// sequences of up to 512. On stories260K the perplexity GPTQ reaches varied by ±0.3% between
// self-written samples of 20,480 tokens; 65,536 take about 10 s there (docs/performance.md).
constexpr int64_t kDefaultCalibrationTokens = 65536;
constexpr int kCalibrationSequenceLength = 512;
constexpr uint64_t kCalibrationSeed = 17;

struct Flags {
  std::string in, out, in_format = "auto", quant = "int8", dtype, out_format = "kuiper", int4_scheme = "min", tokenizer;
  int group_size = 0;  // 0: the quantization's default (int8 64, or 32 as GGUF's Q8_0; int4 32)
  bool check_tensors = false;
  std::string embedding = "int8";  // int4 files: the token embedding's and classifier's storage
  // GPTQ is asked for, not the default: its cost grows with rows × cols² a matrix, seconds for
  // stories260K but core-hours for a 7B model on this CPU code (docs/performance.md).
  bool gptq = false;
  std::string calibration;         // int4: a text to calibrate GPTQ on; empty: the model's own
  int64_t calibration_tokens = 0;  // 0: no GPTQ (after the flags are resolved)
  bool int4_flags_given = false;   // any of the int4 flags above on the command line
};

int int8_group_size(const Flags& f) {
  return f.group_size > 0 ? f.group_size : f.out_format == "gguf" ? 32 : kDefaultInt8GroupSize;
}

// The tokenizer a GGUF output carries and a calibration text is read with: --tokenizer, else a
// GGUF input's own, else the tokenizer.model or tokenizer.json (tok512.model: the bundled model)
// beside the input; empty when there is none.
std::string tokenizer_path(const Flags& f) {
  namespace fs = std::filesystem;
  if (!f.tokenizer.empty()) return f.tokenizer;
  if (is_gguf_file(f.in)) return f.in;
  std::error_code unreachable;  // a path that cannot be examined holds no tokenizer
  const fs::path dir = fs::is_directory(f.in, unreachable) ? fs::path(f.in) : fs::path(f.in).parent_path();
  for (const char* name : {"tokenizer.model", "tokenizer.json", "tok512.model"}) {
    if (fs::is_regular_file(dir / name, unreachable)) return (dir / name).string();
  }
  return "";
}

Status save(const Flags& flags, const Checkpoint& out) {
  if (flags.out_format == "llama2c-v2") return save_llama2c_v2(out, flags.out);
  if (flags.out_format == "kuiper") return save_kuiper(out, flags.out);
  GgufExportOptions options;
  options.tokenizer_path = tokenizer_path(flags);
  if (options.tokenizer_path.empty()) {
    std::fprintf(stderr, "kuiper_export: warning: no tokenizer beside %s (--tokenizer names one); "
                         "llama.cpp needs one to run the file\n", flags.in.c_str());
  }
  KUIPER_ASSIGN_OR_RETURN(ChatTemplateHints hints, read_chat_template_hints(flags.in));
  options.chat_template = hints.jinja;
  options.name = std::filesystem::path(flags.in).filename().string();
  return save_gguf(out, options, flags.out);
}

StatusOr<WeightFormat> weight_format(const Flags& f) {
  if (f.int4_flags_given && f.quant != "int4") {
    return invalid_argument("--embedding, --gptq, --calibration and --calibration-tokens go with --quant int4 only");
  }
  if (f.quant != "none" && !f.dtype.empty()) {
    return invalid_argument("--dtype chooses an unquantized dtype; it does not go with --quant " + f.quant);
  }
  if (f.quant == "int8") {
    return WeightFormat{DataType::kINT8, int8_group_size(f)};
  }
  if (f.quant == "int4") {
    if (f.out_format == "llama2c-v2") return invalid_argument("llama2c-v2 files are int8: use --quant int8");
    if (f.out_format == "gguf") return unsupported("kuiper writes GGUF in F32/F16/BF16/Q8_0, not yet in a 4-bit type");
    return WeightFormat{DataType::kINT4, f.group_size > 0 ? f.group_size : kDefaultInt4GroupSize,
                        f.int4_scheme == "min" ? Int4Scheme::kWithMin : Int4Scheme::kSymmetric};
  }
  if (f.out_format == "llama2c-v2") return invalid_argument("llama2c-v2 files are int8: use --quant int8");
  for (DataType d : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    if ((f.dtype.empty() ? "fp32" : f.dtype) == dtype_name(d)) return WeightFormat{d, 0};
  }
  return invalid_argument("unknown --dtype " + f.dtype);
}

// The calibration sequences: --calibration's text, else text the model writes itself.
StatusOr<std::vector<std::vector<int32_t>>> calibration_sequences(const Flags& f, const Checkpoint& in) {
  const int length = std::min(kCalibrationSequenceLength, in.config.max_seq_len);
  if (f.calibration.empty()) {
    return self_generated_sequences(in.config, in.weights, f.calibration_tokens, length, kCalibrationSeed);
  }
  const std::string path = tokenizer_path(f);
  if (path.empty()) return invalid_argument("no tokenizer to read " + f.calibration + " with (--tokenizer names one)");
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, load_tokenizer(path));
  KUIPER_ASSIGN_OR_RETURN(std::string text, read_regular_file(f.calibration));
  KUIPER_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->encode(text, {.add_bos = false}));
  if (ids.empty()) return invalid_argument("calibration text " + f.calibration + " holds no tokens");
  return text_sequences(ids, in.config.bos_id, f.calibration_tokens, length);
}

// GPTQ's calibration inputs for an int4 output, collected while converting; none when
// --calibration-tokens is 0.
StatusOr<std::optional<CalibrationInputs>> calibrate(const Flags& f, const WeightFormat& format, const Checkpoint& in) {
  if (format.dtype != DataType::kINT4 || f.calibration_tokens == 0) return std::optional<CalibrationInputs>();
  const auto start = std::chrono::steady_clock::now();
  KUIPER_ASSIGN_OR_RETURN(auto sequences, calibration_sequences(f, in));
  std::optional<CalibrationInputs> inputs(std::in_place, in.config, in.weights, std::move(sequences));
  std::printf("calibration text: %lld tokens (%s), %.1f s\n", static_cast<long long>(inputs->tokens()),
              f.calibration.empty() ? "written by the model" : f.calibration.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return inputs;
}

// One line per matrix, or a progress bar redrawn in place when stdout is a terminal.
class ProgressReport {
 public:
  ProgressReport() : terminal_(isatty(fileno(stdout)) == 1) {}

  void operator()(const MatrixProgress& p) {
    if (p.max_error > worst_error_) {
      worst_error_ = p.max_error;
      worst_name_ = p.name;
    }
    if (terminal_) {
      constexpr int kWidth = 30;
      const int filled = kWidth * p.index / p.count;
      std::printf("\r[%s%s] %d/%d %-24s", std::string(filled, '#').c_str(),
                  std::string(kWidth - filled, '.').c_str(), p.index, p.count, p.name.c_str());
      if (p.index == p.count) std::printf("\n");
    } else {
      std::printf("%d/%d %s max error %.3g\n", p.index, p.count, p.name.c_str(), p.max_error);
    }
    std::fflush(stdout);
  }

  double worst_error() const { return worst_error_; }
  const std::string& worst_name() const { return worst_name_; }

 private:
  bool terminal_;
  double worst_error_ = 0;
  std::string worst_name_ = "-";
};

Status run(const Flags& flags) {
  KUIPER_ASSIGN_OR_RETURN(WeightFormat format, weight_format(flags));
  // The same file may be spelled differently (through "..", a symlink or a hard link): compare
  // the files themselves. An OUT that does not exist yet cannot be IN.
  std::error_code not_both_present;
  if (flags.in == flags.out || std::filesystem::equivalent(flags.in, flags.out, not_both_present)) {
    return invalid_argument("input " + flags.in + " and output " + flags.out + " are the same file");
  }
  KUIPER_ASSIGN_OR_RETURN(Checkpoint in, load_checkpoint(flags.in, {flags.in_format}));
  // Calibration runs the model: a NaN weight would surface as NaN logits, so it is named first.
  const bool calibrating = format.dtype == DataType::kINT4 && flags.calibration_tokens > 0;
  if (flags.check_tensors || calibrating) KUIPER_RETURN_IF_ERROR(check_tensors_finite(in));
  std::printf("read %s: %s, %s\n", flags.in.c_str(), in.format.c_str(), in.config.summary().c_str());
  if (flags.out_format == "llama2c-v2") {
    KUIPER_RETURN_IF_ERROR(check_llama2c_v2_group_size(in.config, format.group_size));
  }
  KUIPER_ASSIGN_OR_RETURN(std::optional<CalibrationInputs> calibration, calibrate(flags, format, in));
  ConvertOptions options;
  if (format.dtype == DataType::kINT4 && flags.embedding == "int8") {
    options.embedding = WeightFormat{DataType::kINT8, kDefaultInt8GroupSize};
  }
  options.calibration = calibration ? &*calibration : nullptr;
  ProgressReport report;
  const auto start = std::chrono::steady_clock::now();
  KUIPER_ASSIGN_OR_RETURN(Checkpoint out, convert_checkpoint(in, format, std::ref(report), options));
  std::printf("converted in %.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (calibration) std::printf(" (GPTQ; %d pass(es) over the calibration text)", calibration->passes());
  std::printf("\n");
  if (format.dtype == DataType::kINT8 || format.dtype == DataType::kINT4) {
    std::printf("largest quantization error of any group: %.6g (%s)\n", report.worst_error(),
                report.worst_name().c_str());
  }
  install_interrupt_cleanup(flags.out);
  KUIPER_RETURN_IF_ERROR(save(flags, out));
  std::error_code ec;
  const auto in_bytes = std::filesystem::is_regular_file(flags.in, ec) ? std::filesystem::file_size(flags.in, ec) : 0;
  const auto out_bytes = std::filesystem::file_size(flags.out, ec);
  std::string stored_as =
      flags.out_format == "gguf" && format.dtype == DataType::kINT8 ? "Q8_0" : weight_format_name(format);
  if (options.embedding) stored_as += ", embedding " + weight_format_name(*options.embedding);
  std::printf("wrote %s: %s %s, %llu bytes", flags.out.c_str(), flags.out_format.c_str(),
              stored_as.c_str(), static_cast<unsigned long long>(out_bytes));
  if (in_bytes > 0) std::printf(" (%.3f x the input)", static_cast<double>(out_bytes) / in_bytes);
  std::printf("\n");
  return ok_status();
}

}  // namespace
}  // namespace kuiper

static int program_main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  using namespace kuiper;
  CLI::App app{"Re-store a checkpoint quantized to int8 or int4 or in a float dtype.", "kuiper_export"};
  Flags flags;
  app.add_option("IN", flags.in, "checkpoint file or model directory")->required();
  app.add_option("OUT", flags.out, "output file")->required();
  app.add_option("--format", flags.in_format, "input format (default: recognised from the file)")
      ->check(CLI::IsMember(checkpoint_format_names()));
  app.add_option("--quant", flags.quant, "int8 (default), int4 or none")->check(CLI::IsMember({"int8", "int4", "none"}));
  app.add_option("--group-size", flags.group_size,
                 "weights per scale (default: int8 64, or 32 for gguf, Q8_0's only size; int4 32)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--int4-scheme", flags.int4_scheme, "int4: min (default; scale and minimum per group) or symmetric (scale per group)")
      ->check(CLI::IsMember({"symmetric", "min"}));
  app.add_option("--dtype", flags.dtype, "dtype with --quant none: fp32 (default), fp16, bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_flag("--check-tensors", flags.check_tensors, "refuse weights holding NaN or Inf before converting");
  app.add_option("--out-format", flags.out_format, "kuiper (default), llama2c-v2 or gguf (llama.cpp; int8 as Q8_0)")
      ->check(CLI::IsMember({"kuiper", "llama2c-v2", "gguf"}));
  app.add_option("--tokenizer", flags.tokenizer,
                 "the tokenizer a gguf output stores and --calibration's text is read with (default: the input's own, or tokenizer.model/.json beside it)");
  app.add_option("--embedding", flags.embedding,
                 "with --quant int4: the token embedding and classifier in int8 (default; groups of 64) or int4")
      ->check(CLI::IsMember({"int8", "int4"}));
  app.add_flag("--gptq", flags.gptq,
               "with --quant int4: GPTQ, calibrated on 65,536 tokens of text the model writes itself (without it each "
               "group is quantized on its own)");
  app.add_option("--calibration", flags.calibration, "with --quant int4: GPTQ calibrated on this text file");
  app.add_option("--calibration-tokens", flags.calibration_tokens, "with --quant int4: GPTQ on this many calibration tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  flags.int4_flags_given =
      app.count("--embedding") + app.count("--gptq") + app.count("--calibration") + app.count("--calibration-tokens") > 0;
  if (flags.gptq || !flags.calibration.empty() || flags.calibration_tokens > 0) {
    flags.calibration_tokens = flags.calibration_tokens > 0 ? flags.calibration_tokens : kDefaultCalibrationTokens;
  }
  const Status status = run(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "kuiper_export: error: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return kuiper::cli::guarded_main("kuiper_export", [&] { return program_main(argc, argv); });
}
