#include "batch_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "kuiper/base/device.h"

namespace kuiper::cli {
namespace {

using Clock = std::chrono::steady_clock;

class NumberedTokenizer : public Tokenizer {
 public:
  explicit NumberedTokenizer(int vocab_size) : vocab_size_(vocab_size) {}
  StatusOr<std::vector<int32_t>> encode(std::string_view, const EncodeOptions&) const override {
    return unsupported("a numbered tokenizer does not encode text");
  }
  std::string token_bytes(int32_t id, int32_t) const override {
    std::string text(1, '<');
    text.append(std::to_string(id)).push_back('>');
    return text;
  }
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return -1; }
  std::vector<int32_t> eos_ids() const override { return {}; }
  std::optional<int32_t> special_token(std::string_view) const override { return std::nullopt; }
  std::string kind() const override { return "numbered"; }

 private:
  int vocab_size_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Decode steps a sequence may take while the others are still prefilling (the engine decodes
// the sequences whose prompt is in while it prefills the rest, step_rows positions a step).
int prefill_steps(int batch, int fill, int step_rows) { return (batch * fill + step_rows - 1) / step_rows + batch; }

struct DecodeTiming {
  double seconds_per_step = 0;
  double mean_context = 0;  // cache rows a sequence attends to, averaged over sequences and steps
};

// One decode step of `batch` sequences of `fill` prompt tokens, all of them decoding in every
// timed step.
StatusOr<DecodeTiming> time_decode_steps(Engine& engine, int batch, int fill, int steps, int round, int step_rows) {
  const int vocab = engine.model().config().vocab_size;
  std::vector<int> produced(batch, 0);
  SamplingParams params;
  params.temperature = 0.f;
  params.ignore_eos = true;
  // Enough for the tokens decoded while the last prompt is prefilled, the timed steps and a spare:
  // no sequence may finish inside the timed window.
  params.max_tokens = prefill_steps(batch, fill, step_rows) + steps + 2;
  std::vector<RequestId> ids;
  for (int s = 0; s < batch; ++s) {
    // Distinct prompts, so that no sequence reads another's cached blocks.
    std::vector<int32_t> prompt(fill);
    for (int i = 0; i < fill; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + s * 104729 + round * 15485863 + 13) % vocab);
    KUIPER_ASSIGN_OR_RETURN(RequestId id, engine.submit(std::move(prompt), params, [&produced, s](const RequestOutput& out) {
      produced[s] += static_cast<int>(out.tokens.size());
    }));
    ids.push_back(id);
  }
  const auto all_started = [&] { return std::all_of(produced.begin(), produced.end(), [](int n) { return n > 0; }); };
  while (!all_started()) {
    KUIPER_ASSIGN_OR_RETURN(bool busy, engine.step());
    if (!busy) return internal_error("the engine went idle before every sequence started");
  }
  const std::vector<int> before = produced;
  profile_range_begin();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) KUIPER_RETURN_IF_ERROR(engine.step().status());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  profile_range_end();
  DecodeTiming timing{seconds / steps, 0};
  for (int s = 0; s < batch; ++s) {
    if (produced[s] - before[s] != steps) return internal_error("a sequence did not decode in every timed step");
    timing.mean_context += (fill + before[s] + steps / 2.0) / batch;
  }
  // Decoding the sequences that started last to max_tokens would take about as many steps again
  // as their prefill did; cancelled, they all end at the next step.
  for (RequestId id : ids) engine.cancel(id);
  for (;;) {
    KUIPER_ASSIGN_OR_RETURN(bool busy, engine.step());
    if (!busy) break;
  }
  return timing;
}

}  // namespace

int batch_bench_context(const BatchBenchOptions& o) {
  const int fill = *std::max_element(o.fills.begin(), o.fills.end());
  const int batch = *std::max_element(o.batches.begin(), o.batches.end());
  return fill + prefill_steps(batch, fill, batch_bench_engine_options(o).max_step_rows) + o.decode_tokens + 2;
}

EngineOptions batch_bench_engine_options(const BatchBenchOptions& o) {
  EngineOptions e;
  e.max_seqs = *std::max_element(o.batches.begin(), o.batches.end());
  e.max_step_rows = std::max(512, e.max_seqs);
  e.prefix_cache = false;
  return e;
}

Status run_batch_bench(Engine& engine, const BatchBenchOptions& o) {
  const LlamaModel& model = engine.model();
  const double kv_row_bytes = 2.0 * model.config().n_layers * model.config().kv_dim() * dtype_size(model.kv_dtype());
  std::printf("\nbatched decode (engine, %d steps, median of %d):\n", o.decode_tokens, o.repeats);
  for (int fill : o.fills) {
    double single = 0;
    for (int batch : o.batches) {
      std::vector<double> times;
      double context = 0;
      for (int r = 0; r < o.repeats; ++r) {
        KUIPER_ASSIGN_OR_RETURN(DecodeTiming t, time_decode_steps(engine, batch, fill, o.decode_tokens, r,
                                                                       batch_bench_engine_options(o).max_step_rows));
        times.push_back(t.seconds_per_step);
        context = t.mean_context;
      }
      const double step = median(times), tokens_per_second = batch / step;
      if (batch == 1) single = tokens_per_second;
      // One step reads the weights once and each sequence's cache.
      const double bytes = model.weight_bytes() + batch * kv_row_bytes * context;
      const double roofline = o.copy_gbs > 0 ? bytes / step / 1e9 / o.copy_gbs : 0;
      std::printf("  %3d sequences at context %5d: %10.1f tokens/s  step %7.2f ms  %6.1f GB/s  %5.1f%% of copy bw",
                  batch, fill, tokens_per_second, step * 1e3, bytes / step / 1e9, 100 * roofline);
      if (single > 0 && batch > 1) std::printf("  %.2fx one sequence", tokens_per_second / single);
      std::printf("\nRESULT batch_decode_%d_ctx%d %.2f\nRESULT batch_roofline_%d_ctx%d %.4f\n", batch, fill,
                  tokens_per_second, batch, fill, roofline);
      std::fflush(stdout);
    }
  }
  return ok_status();
}

std::unique_ptr<Tokenizer> numbered_tokenizer(int vocab_size) { return std::make_unique<NumberedTokenizer>(vocab_size); }

}  // namespace kuiper::cli
