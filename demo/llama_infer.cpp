// llama_infer: generate text from a prompt, streaming it as it is produced.
//   llama_infer                                  # a story from the bundled stories260K model
//   llama_infer -m model.bin -p "Once upon a time" -n 200 --temp 0
// It runs the engine (kuiper/engine) with one sequence. Generation ends at the model's end
// tokens and at BOS, which llama2.c's story models emit where one story ends and the next
// begins (--ignore-eos keeps going).
#include <chrono>
#include <cstdio>

#include "cli_common.h"
#include "guarded_main.h"

static int program_main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  using namespace kuiper;
  using Clock = std::chrono::steady_clock;

  CLI::App app{"Generate text with a LLaMA model.", "llama_infer"};
  cli::ModelFlags flags;
  std::string prompt = "Once upon a time";
  int steps = 256;
  bool ignore_eos = false;
  cli::add_model_flags(app, flags);
  app.add_option("-p,--prompt", prompt, "text to continue");
  app.add_option("-n,--steps", steps, "maximum number of tokens to generate")->check(CLI::Range(0, 1 << 24));
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past the model's end tokens and BOS");
  if (auto code = cli::parse_or_exit_code(app, argc, argv)) return *code;
  if (Status text = cli::check_utf8_flag("--prompt", prompt); !text.ok()) return cli::fail("llama_infer", text);

  EngineOptions options;
  options.max_seqs = 1;
  auto loaded = cli::load_engine(flags, options);
  if (!loaded.ok()) return cli::fail("llama_infer", loaded.status());
  Engine& engine = *loaded->engine;
  auto prompt_ids = loaded->tokenizer->encode(prompt, {.add_bos = true});
  if (!prompt_ids.ok()) return cli::fail("llama_infer", prompt_ids.status());

  SamplingParams params = cli::sampling_params(flags, steps);
  params.ignore_eos = ignore_eos;
  const auto start = Clock::now();
  Clock::time_point first_token = start;
  RequestOutput last;
  bool any_output = false;
  auto submitted = engine.submit(*prompt_ids, params, [&](const RequestOutput& out) {
    if (!any_output) first_token = Clock::now();
    any_output = true;
    std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    std::fflush(stdout);
    last = out;
  });
  if (!submitted.ok()) return cli::fail("llama_infer", submitted.status());
  std::fputs(prompt.c_str(), stdout);  // the text arrives during the steps below
  std::fflush(stdout);
  for (;;) {
    auto busy = engine.step();
    if (!busy.ok()) break;  // the request's own output carries the error
    if (!*busy) break;
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (last.finish == FinishReason::kError) return cli::fail("llama_infer", last.error);
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const double prefill = seconds(start, first_token), decode = seconds(first_token, Clock::now());
  // The first token comes with the prefill; the rest are decode steps.
  const int decoded = std::max(0, last.completion_tokens - 1);
  std::fprintf(stderr, "prompt: %d tokens, %.1f tokens/s | generated: %d tokens, %.1f tokens/s (%s)\n",
               last.prompt_tokens, prefill > 0 ? last.prompt_tokens / prefill : 0.0, last.completion_tokens,
               decode > 0 ? decoded / decode : 0.0,
               last.finish == FinishReason::kStop ? "end of text" : finish_reason_name(last.finish));
  return 0;
}

int main(int argc, char** argv) {
  return kuiper::cli::guarded_main("llama_infer", [&] { return program_main(argc, argv); });
}
