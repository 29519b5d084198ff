// llama_perplexity: how well a model predicts a text file — exp of the mean negative
// log-likelihood of every next token. The text is tokenized once and cut into windows of the
// context length, each run in one forward_all pass. A window starts with BOS, or, where the
// vocabulary has none (Qwen2, Qwen3), with the text token just before its first scored token:
// the text's first token is then context only, never scored (llama.cpp's perplexity leaves it
// unscored too). Every other token is scored once, given the tokens before it in its window.
// --decode runs the same windows one token at a time instead, through the decode step that
// generation takes (on CUDA its GEMVs round their inputs differently from the prefill GEMMs),
// for the same figure.
//   llama_perplexity -f text.txt
//   llama_perplexity -m model.bin -f text.txt --dtype int8 -c 256 --max-tokens 20000
//   llama_perplexity -f text.txt --device cuda --dtype int8 --decode
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli_common.h"
#include "guarded_main.h"
#include "kuiper/base/regular_file.h"

namespace kuiper {
namespace {

// −log softmax(logits)[target], in double precision.
double negative_log_likelihood(const float* logits, int64_t vocab, int32_t target) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double{logits[i]} - max_logit);
  return std::log(sum) - (double{logits[target]} - max_logit);
}

struct Score {
  double total_nll = 0;
  int64_t scored = 0;
  double perplexity() const { return std::exp(total_nll / static_cast<double>(scored)); }
};

// The logits of every position of `tokens` (fp32 [n, vocab] on the host): one forward_all
// pass, or (decode) one forward step per token.
StatusOr<Tensor> window_logits(LlamaModel& model, const std::vector<int32_t>& tokens, bool decode) {
  if (!decode) return model.forward_all(tokens, 0);
  const int64_t vocab = model.config().vocab_size, n = static_cast<int64_t>(tokens.size());
  KUIPER_ASSIGN_OR_RETURN(Tensor all, Tensor::zeros_cpu(DataType::kFP32, {n, vocab}));
  for (int64_t i = 0; i < n; ++i) {
    KUIPER_ASSIGN_OR_RETURN(Tensor logits, model.forward(std::span(tokens).subspan(i, 1), static_cast<int>(i)));
    KUIPER_ASSIGN_OR_RETURN(Tensor row, all.slice(i, i + 1));
    KUIPER_RETURN_IF_ERROR(row.copy_from(logits, model.stream()));
  }
  KUIPER_RETURN_IF_ERROR(synchronize(model.stream()));
  return all;
}

// Scores `text` (tokens without BOS) window by window; bos < 0: the vocabulary has none, and
// the token before a window's scored ones leads it instead.
StatusOr<Score> score(LlamaModel& model, int32_t bos, const std::vector<int32_t>& text, int window, bool decode) {
  Score s;
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> tokens;
  for (size_t begin = bos < 0 ? 1 : 0; begin < text.size(); begin += window - 1) {
    const size_t end = std::min(text.size(), begin + window - 1);
    tokens.assign(1, bos < 0 ? text[begin - 1] : bos);
    tokens.insert(tokens.end(), text.begin() + begin, text.begin() + end);
    KUIPER_ASSIGN_OR_RETURN(Tensor logits, window_logits(model, tokens, decode));
    // Row i predicts tokens[i + 1].
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      s.total_nll += negative_log_likelihood(logits.data<float>() + i * vocab, vocab, tokens[i + 1]);
      ++s.scored;
    }
  }
  return s;
}

}  // namespace
}  // namespace kuiper

static int program_main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  using namespace kuiper;

  CLI::App app{"Perplexity of a model on a text file.", "llama_perplexity"};
  app.footer("The text is scored in windows of the context length, each starting with BOS. Where the vocabulary has "
             "no BOS (Qwen2, Qwen3), a window starts with the token before its first scored one instead, so the "
             "text's first token is context only and is not scored.");
  cli::ModelFlags flags;
  std::string text_path;
  int64_t max_tokens = 0;
  bool decode = false;
  cli::add_model_flags(app, flags, /*sampling=*/false);
  app.add_option("-f,--file", text_path, "text file to score")->required();
  app.add_option("--max-tokens", max_tokens, "score only the first N tokens of the text (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_flag("--decode", decode, "run each window one token at a time through the decode step, as generation does");
  if (auto code = cli::parse_or_exit_code(app, argc, argv)) return *code;

  auto text = read_regular_file(text_path);
  if (!text.ok()) return cli::fail("llama_perplexity", text.status());
  auto loaded = cli::load_model(flags);
  if (!loaded.ok()) return cli::fail("llama_perplexity", loaded.status());
  auto ids = loaded->tokenizer->encode(*text, {.add_bos = false});
  if (!ids.ok()) return cli::fail("llama_perplexity", ids.status());
  if (max_tokens > 0 && static_cast<int64_t>(ids->size()) > max_tokens) ids->resize(max_tokens);
  const int window = loaded->model->context();
  const int32_t bos = loaded->tokenizer->bos_id();
  const size_t needed = bos < 0 ? 2 : 1;  // without BOS the first token is context only
  if (ids->size() < needed || window < 2) {
    return cli::fail("llama_perplexity", invalid_argument("nothing to score: the text has fewer than " + std::to_string(needed) +
                                                          " tokens" + (bos < 0 ? " (no BOS: the first is context only)" : "") +
                                                          " or the context is under 2"));
  }

  const auto start = std::chrono::steady_clock::now();
  auto result = score(*loaded->model, bos, *ids, window, decode);
  if (!result.ok()) return cli::fail("llama_perplexity", result.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("model: %s (%s, weights %s)\n", loaded->model_path.c_str(), loaded->format.c_str(),
              std::string(dtype_name(loaded->model->weight_dtype())).c_str());
  std::printf("text: %s, %lld tokens scored in windows of %d%s%s\n", text_path.c_str(),
              static_cast<long long>(result->scored), window,
              bos < 0 ? " (no BOS: the first token is context only)" : "", decode ? ", one decode step a token" : "");
  std::printf("mean NLL %.5f nats/token, perplexity %.4f (%.1f s)\n", result->total_nll / result->scored,
              result->perplexity(), secs);
  return 0;
}

int main(int argc, char** argv) {
  return kuiper::cli::guarded_main("llama_perplexity", [&] { return program_main(argc, argv); });
}
