// llama_infer: generate text from a prompt, streaming it as it is produced.
//   llama_infer                                  # a story from the bundled stories260K model
//   llama_infer -m model.bin -p "Once upon a time" -n 200 --temp 0
#include <cstdio>
#include <iostream>

#include "cli_common.h"
#include "kuiper/generation/session.h"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  using namespace kuiper;

  CLI::App app{"Generate text with a LLaMA model.", "llama_infer"};
  cli::ModelFlags flags;
  std::string prompt = "Once upon a time";
  int steps = 256;
  cli::add_model_flags(app, flags);
  app.add_option("-p,--prompt", prompt, "text to continue");
  app.add_option("-n,--steps", steps, "maximum number of tokens to generate")->check(CLI::Range(0, 1 << 24));
  if (auto code = cli::parse_or_exit_code(app, argc, argv)) return *code;

  auto loaded = cli::load_model(flags);
  if (!loaded.ok()) return cli::fail("llama_infer", loaded.status());
  auto prompt_ids = loaded->tokenizer->encode(prompt, {.add_bos = true});
  if (!prompt_ids.ok()) return cli::fail("llama_infer", prompt_ids.status());

  Sampler sampler(cli::sampler_config(flags));
  Session session(*loaded->model, *loaded->tokenizer, sampler);
  std::fputs(prompt.c_str(), stdout);
  GenerationOptions options;
  options.max_new_tokens = steps;
  auto stats = session.generate(*prompt_ids, options, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!stats.ok()) return cli::fail("llama_infer", stats.status());
  std::fprintf(stderr, "prompt: %d tokens, %.1f tokens/s | generated: %d tokens, %.1f tokens/s (%s)\n",
               stats->prompt_tokens, stats->prefill_tokens_per_second(), stats->generated_tokens,
               stats->decode_tokens_per_second(), stop_reason_name(stats->stop_reason));
  return 0;
}
