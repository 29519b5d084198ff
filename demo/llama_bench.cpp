// llama_bench: prefill and decode speed of a model, against the memory bandwidth measured on
// the same machine in the same run.
//   llama_bench                                # bundled stories260K on the CPU
//   llama_bench --shape 768,2048,12,12,12,32000 # a random-weight model built in memory
//   llama_bench --shape llama2-7b --device cuda --contexts 128,1024,4096
//   llama_bench --shape cpu-medium --batch 1,4,8,16 --contexts 128   # several sequences (engine)
//   llama_bench --shape llama2-70b --device cuda --tp 4                # split over 4 GPUs
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "all_reduce_bench.h"
#include "batch_bench.h"
#include "cli_common.h"
#include "guarded_main.h"
#include "kuiper/base/device.h"
#include "kuiper/checkpoint/random_checkpoint.h"

namespace kuiper {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Named shapes: dim, hidden, layers, heads, kv heads, vocab.
const std::map<std::string, std::vector<int>>& shape_presets() {
  static const std::map<std::string, std::vector<int>> presets = {
      {"cpu-medium", {768, 2048, 12, 12, 12, 32000}},
      {"llama2-7b", {4096, 11008, 32, 32, 32, 32000}},
      {"llama3-8b", {4096, 14336, 32, 32, 8, 128256}},
      {"llama2-70b", {8192, 28672, 80, 64, 8, 32000}},
  };
  return presets;
}

// Comma-separated non-negative integers, each written out in full ("12x" is refused); empty
// when the text is not such a list.
std::vector<int> parse_int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    int value = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (error != std::errc() || end != item.data() + item.size() || value < 0) return {};
    out.push_back(value);
  }
  return out;
}

StatusOr<LlamaConfig> parse_shape(const std::string& text, int max_context) {
  const auto preset = shape_presets().find(text);
  const std::vector<int> v = preset != shape_presets().end() ? preset->second : parse_int_list(text);
  if (v.size() != 6) {
    return invalid_argument("--shape takes dim,hidden,layers,heads,kv_heads,vocab or a preset "
                            "(cpu-medium, llama2-7b, llama3-8b, llama2-70b), got '" + text + "'");
  }
  LlamaConfig c;
  c.dim = v[0]; c.hidden_dim = v[1]; c.n_layers = v[2]; c.n_heads = v[3]; c.n_kv_heads = v[4];
  c.vocab_size = v[5];
  c.max_seq_len = max_context;
  c.shared_classifier = false;
  if (c.vocab_size == 128256) c.rope_theta = 500000.f;
  KUIPER_RETURN_IF_ERROR(c.validate());
  return c;
}

// Host memory bandwidth: a parallel copy (bytes read + written) and a parallel read-only sum,
// each over 1 GiB, best of several runs.
struct HostBandwidth { double copy_gbs = 0, read_gbs = 0; };

HostBandwidth measure_host_bandwidth() {
  const size_t n = (size_t{1} << 30) / sizeof(float);
  std::vector<float> a(n, 1.f), b(n, 2.f);
  HostBandwidth bw;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < 64; ++chunk) {
      const size_t begin = n / 64 * chunk;
      std::memcpy(b.data() + begin, a.data() + begin, n / 64 * sizeof(float));
    }
    auto t1 = Clock::now();
    // Eight independent partial sums per thread, so the adds never wait on each other.
    float sum = 0.f;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t chunk = 0; chunk < 64; ++chunk) {
      const float* p = b.data() + n / 64 * chunk;
      float part[8] = {};
      for (size_t i = 0; i < n / 64; i += 8) {
#pragma omp simd
        for (int j = 0; j < 8; ++j) part[j] += p[i + j];
      }
      for (float v : part) sum += v;
    }
    auto t2 = Clock::now();
    if (sum == 0.f) std::fputs("", stderr);  // keeps the sum alive
    bw.copy_gbs = std::max(bw.copy_gbs, 2.0 * n * sizeof(float) / seconds(t0, t1) / 1e9);
    bw.read_gbs = std::max(bw.read_gbs, 1.0 * n * sizeof(float) / seconds(t1, t2) / 1e9);
  }
  return bw;
}

// llama_bench --batch: the model inside an engine, several sequences decoding together.
Status run_batched(cli::ModelFlags flags, const std::string& shape, cli::BatchBenchOptions options) {
  flags.context = std::max(flags.context, cli::batch_bench_context(options));
  const EngineOptions engine_options = cli::batch_bench_engine_options(options);
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::string name;
  if (!shape.empty()) {
    KUIPER_ASSIGN_OR_RETURN(LlamaConfig config, parse_shape(shape, flags.context));
    const DataType stored = flags.device == "cuda" ? DataType::kBF16 : DataType::kFP32;
    KUIPER_ASSIGN_OR_RETURN(Checkpoint ckpt, make_random_checkpoint(config, 1234, stored));
    KUIPER_ASSIGN_OR_RETURN(ckpt, cli::quantize_if_asked(std::move(ckpt), flags));
    KUIPER_ASSIGN_OR_RETURN(ModelOptions model_options, cli::model_options(flags));
    tokenizer = cli::numbered_tokenizer(config.vocab_size);
    KUIPER_ASSIGN_OR_RETURN(engine, Engine::create(ckpt.config, ckpt.weights, model_options, *tokenizer, engine_options));
    name = "random " + config.summary();
  } else {
    KUIPER_ASSIGN_OR_RETURN(cli::LoadedEngine loaded, cli::load_engine(flags, engine_options));
    tokenizer = std::move(loaded.tokenizer);
    engine = std::move(loaded.engine);
    name = loaded.model_path;
  }
  const LlamaModel& model = engine->model();
  std::printf("model: %s\ndevice: %s, weights %s, kv cache %s\n", name.c_str(),
              std::string(device_name(model.device())).c_str(), std::string(dtype_name(model.weight_dtype())).c_str(),
              std::string(dtype_name(model.kv_dtype())).c_str());
  std::printf("weights read per step: %.1f MB\n", model.weight_bytes() / 1e6);
  if (model.device() == DeviceType::kCPU) {
    const HostBandwidth bw = measure_host_bandwidth();
    std::printf("host memory bandwidth: copy %.1f GB/s (read+write), read %.1f GB/s\n", bw.copy_gbs, bw.read_gbs);
    options.copy_gbs = bw.copy_gbs;
  } else {
    KUIPER_ASSIGN_OR_RETURN(options.copy_gbs, cuda_copy_bandwidth_gbs(size_t{1} << 30));
    std::printf("device copy bandwidth: %.0f GB/s (1 GiB device-to-device, read+write)%s\n", options.copy_gbs,
                model.ranks() > 1 ? ", GPU 0; the roofline below is that of all ranks" : "");
    options.copy_gbs *= model.ranks();
  }
  return cli::run_batch_bench(*engine, options);
}

}  // namespace
}  // namespace kuiper

static int program_main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  using namespace kuiper;

  CLI::App app{"Measure prefill and decode speed.", "llama_bench"};
  cli::ModelFlags flags;
  std::string shape, contexts = "128", batches;
  int prompt_tokens = 128, decode_tokens = 64, repeats = 3;
  cli::add_model_flags(app, flags, /*sampling=*/false);
  app.add_option("--shape", shape, "random-weight model instead of a file: preset or dim,hidden,layers,heads,kv,vocab");
  app.add_option("--prompt", prompt_tokens, "prefill length in tokens")->check(CLI::Range(1, 1 << 24));
  app.add_option("--decode", decode_tokens, "tokens decoded per measurement")->check(CLI::Range(1, 1 << 24));
  app.add_option("--contexts", contexts, "comma-separated cache fill levels at which decode is timed");
  app.add_option("--batch", batches, "comma-separated sequence counts: aggregate decode of several sequences in the engine");
  app.add_option("--repeats", repeats, "measurements per figure (the median is reported)")->check(CLI::Range(1, 1 << 24));
  if (auto code = cli::parse_or_exit_code(app, argc, argv)) return *code;

  const std::vector<int> fill_levels = parse_int_list(contexts);
  if (fill_levels.empty()) {
    return cli::fail("llama_bench", invalid_argument("--contexts takes cache fill levels like 128,1024, got '" +
                                                     contexts + "'"));
  }
  const int needed = std::max(prompt_tokens, *std::max_element(fill_levels.begin(), fill_levels.end()) + decode_tokens);
  if (!batches.empty()) {
    cli::BatchBenchOptions options{parse_int_list(batches), fill_levels, decode_tokens, repeats};
    if (options.batches.empty() || *std::min_element(options.batches.begin(), options.batches.end()) <= 0) {
      return cli::fail("llama_bench", invalid_argument("--batch takes sequence counts like 1,4,8,16, got '" + batches + "'"));
    }
    if (auto status = run_batched(flags, shape, options); !status.ok()) return cli::fail("llama_bench", status);
    return 0;
  }

  std::unique_ptr<LlamaModel> model;
  std::string name;
  if (!shape.empty()) {
    auto config = parse_shape(shape, needed);
    if (!config.ok()) return cli::fail("llama_bench", config.status());
    const DataType stored = flags.device == "cuda" ? DataType::kBF16 : DataType::kFP32;
    auto ckpt = make_random_checkpoint(*config, 1234, stored);
    if (!ckpt.ok()) return cli::fail("llama_bench", ckpt.status());
    flags.context = needed;
    auto created = cli::build_model(std::move(ckpt).value(), flags);
    if (!created.ok()) return cli::fail("llama_bench", created.status());
    model = std::move(created).value();
    name = "random " + config->summary();
  } else {
    flags.context = flags.context ? flags.context : 0;
    auto loaded = cli::load_model(flags);
    if (!loaded.ok()) return cli::fail("llama_bench", loaded.status());
    model = std::move(loaded->model);
    name = loaded->model_path;
  }
  if (needed > model->context()) {
    return cli::fail("llama_bench", invalid_argument("the benchmark needs " + std::to_string(needed) +
                                                     " positions but the model's context is " +
                                                     std::to_string(model->context())));
  }

  const int vocab = model->config().vocab_size;
  std::vector<int32_t> tokens(needed);
  for (int i = 0; i < needed; ++i) tokens[i] = (i * 7919 + 13) % vocab;  // varied ids

  const auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  const auto run = [&](int start, int count, bool batched) -> StatusOr<double> {
    auto t0 = Clock::now();
    if (batched) {
      KUIPER_ASSIGN_OR_RETURN(Tensor logits, model->forward(std::span(tokens).subspan(start, count), start));
    } else {
      for (int i = 0; i < count; ++i) {
        KUIPER_ASSIGN_OR_RETURN(Tensor logits, model->forward(std::span(tokens).subspan(start + i, 1), start + i));
      }
    }
    KUIPER_RETURN_IF_ERROR(synchronize(model->stream()));
    return seconds(t0, Clock::now());
  };

  std::printf("model: %s\ndevice: %s, weights %s, kv cache %s\n", name.c_str(),
              std::string(device_name(model->device())).c_str(),
              std::string(dtype_name(model->weight_dtype())).c_str(),
              std::string(dtype_name(model->kv_dtype())).c_str());
  std::printf("weights read per token: %.1f MB\n", model->weight_bytes() / 1e6);
  const int ranks = model->ranks();
  if (ranks > 1) {
    // Two all-reduces of one residual row per layer, timed on their own: in the communicators'
    // shared tensors, as the model's are (symmetric windows where NCCL's kernels are safe), and
    // in memory from the device's allocator.
    const int per_token = 2 * model->config().n_layers;
    auto shared = cli::all_reduce_seconds(model->device(), ranks, model->config().dim, per_token, true);
    if (!shared.ok()) return cli::fail("llama_bench", shared.status());
    auto ordinary = cli::all_reduce_seconds(model->device(), ranks, model->config().dim, per_token, false);
    if (!ordinary.ok()) return cli::fail("llama_bench", ordinary.status());
    std::printf("tensor parallel over %d ranks (%s): %d all-reduces of %d floats per token take %.1f us "
                "in shared tensors (%.1f us in allocator memory)\n",
                ranks, model->collectives().c_str(), per_token, model->config().dim, *shared * 1e6, *ordinary * 1e6);
  }
  HostBandwidth host_bw;
  double device_copy_gbs = 0;
  if (model->device() == DeviceType::kCPU) {
    host_bw = measure_host_bandwidth();
    std::printf("host memory bandwidth: copy %.1f GB/s (read+write), read %.1f GB/s\n", host_bw.copy_gbs, host_bw.read_gbs);
  } else {
    auto bw = cuda_copy_bandwidth_gbs(size_t{1} << 30);
    if (!bw.ok()) return cli::fail("llama_bench", bw.status());
    device_copy_gbs = *bw;
    std::printf("device copy bandwidth: %.0f GB/s (1 GiB device-to-device, read+write)%s\n", device_copy_gbs,
                ranks > 1 ? ", GPU 0; the roofline below is that of all ranks" : "");
    device_copy_gbs *= ranks;
  }

  // Warm up once (caches, thread pools, lazily created handles).
  if (auto warm = run(0, std::min(prompt_tokens, 8), true); !warm.ok()) return cli::fail("llama_bench", warm.status());

  std::vector<double> prefill;
  for (int r = 0; r < repeats; ++r) {
    auto t = run(0, prompt_tokens, true);
    if (!t.ok()) return cli::fail("llama_bench", t.status());
    prefill.push_back(*t);
  }
  std::printf("\n%-28s %12.1f tokens/s\n", ("prefill " + std::to_string(prompt_tokens) + " tokens").c_str(),
              prompt_tokens / median(prefill));
  std::printf("RESULT prefill_%d %.2f\n", prompt_tokens, prompt_tokens / median(prefill));

  const double kv_row_bytes = 2.0 * model->config().n_layers * model->config().kv_dim() * dtype_size(model->kv_dtype());
  for (int fill : fill_levels) {
    if (fill > 0) {
      if (auto t = run(0, fill, true); !t.ok()) return cli::fail("llama_bench", t.status());
    }
    std::vector<double> times;
    profile_range_begin();  // a profiler's window (tools/cuda_kernel_trace.cpp): the decode alone
    for (int r = 0; r < repeats; ++r) {
      auto t = run(fill, decode_tokens, false);
      if (!t.ok()) return cli::fail("llama_bench", t.status());
      times.push_back(*t / decode_tokens);
    }
    profile_range_end();
    const double per_token = median(times);
    const double bytes = model->weight_bytes() + kv_row_bytes * (fill + decode_tokens / 2.0);
    const double gbs = bytes / per_token / 1e9;
    std::printf("%-28s %12.1f tokens/s  %8.1f GB/s", ("decode at context " + std::to_string(fill)).c_str(),
                1.0 / per_token, gbs);
    if (host_bw.read_gbs > 0) {
      std::printf("  %5.1f%% of read bw, %5.1f%% of copy bw", 100 * gbs / host_bw.read_gbs, 100 * gbs / host_bw.copy_gbs);
    }
    if (device_copy_gbs > 0) std::printf("  %5.1f%% of copy bw (roofline)", 100 * gbs / device_copy_gbs);
    std::printf("\nRESULT decode_%d %.2f\n", fill, 1.0 / per_token);
  }
  if (model->device() == DeviceType::kCUDA) {
    auto alloc = allocator_for(DeviceType::kCUDA);
    if (alloc.ok()) std::printf("peak device memory (kuiper pool): %.2f GB\n", (*alloc)->peak_bytes() / 1e9);
  }
  return 0;
}

int main(int argc, char** argv) {
  return kuiper::cli::guarded_main("llama_bench", [&] { return program_main(argc, argv); });
}
