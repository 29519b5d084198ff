#include "test/test_util.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <glog/logging.h>

#include "kuiper/base/half.h"
#include "kuiper/checkpoint/formats/safetensors.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "kuiper/engine/engine.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/model/weight_placement.h"
#include "kuiper/op/kernel_table.h"

namespace kuiper::test {

std::string source_path(const std::string& relative) {
  return std::string(KUIPER_SOURCE_DIR) + "/" + relative;
}

std::string scratch_dir(const std::string& name) {
  // ctest runs tests in parallel processes: each test gets a folder of its own.
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string owner = test ? std::string(test->test_suite_name()) + "." + test->name() : "no_test";
  for (char& c : owner) {
    if (c == '/') c = '_';
  }
  const auto dir = std::filesystem::path(KUIPER_BINARY_DIR) / "test_scratch" / owner / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

const op::ExecutionContext& kernel_context(DeviceType device) {
  // Made once and never destroyed: its CUDA stream and handles must not outlive the runtime,
  // which static destructors might.
  static const op::ExecutionContext* contexts[2] = {};
  const op::ExecutionContext*& ctx = contexts[device == DeviceType::kCPU ? 0 : 1];
  if (ctx == nullptr) {
    op::ScratchPlan plan;
    if (device == DeviceType::kCUDA) {
      plan[op::ScratchUse::kGemmInput] = size_t{256} << 20;
      plan[op::ScratchUse::kDequantizedWeight] = size_t{1} << 30;
      plan[op::ScratchUse::kAttentionPartials] = size_t{64} << 20;
      plan[op::ScratchUse::kNormedInput] = size_t{1} << 20;
    }
    // The default stream: the tests' copies and allocations are made without one.
    auto made = op::ExecutionContext::create(device, plan, op::ExecutionContext::StreamChoice::kDefault);
    CHECK(made.ok()) << made.status().to_string();
    ctx = made->release();
  }
  return *ctx;
}

LlamaConfig model_shape(int dim, int hidden_dim, int layers, int heads, int kv_heads, int vocab, int max_seq_len) {
  LlamaConfig c;
  c.dim = dim;
  c.hidden_dim = hidden_dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.max_seq_len = max_seq_len;
  return c;
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  auto t = Tensor::zeros_cpu(DataType::kFP32, shape);
  CHECK(t.ok()) << t.status().to_string();
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t->data<float>();
  for (int64_t i = 0; i < t->numel(); ++i) p[i] = dist(rng);
  return std::move(t).value();
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_load_refused(const std::string& path, const std::string& message_part, const LoadOptions& options) {
  auto ckpt = load_checkpoint(path, options);
  ASSERT_FALSE(ckpt.ok()) << path << " was accepted";
  EXPECT_NE(ckpt.status().message().find(message_part), std::string::npos) << ckpt.status().to_string();
  EXPECT_EQ(ckpt.status().message().find('\n'), std::string::npos) << "errors are one line";
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
  SafetensorsWriter writer;
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(writer.add(name, t).ok()) << name;
  EXPECT_TRUE(writer.write(path).ok()) << path;
}

std::vector<float> last_logits(const Checkpoint& ckpt, const std::vector<int32_t>& ids) {
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, {});
  CHECK(model.ok()) << model.status().to_string();
  auto logits = (*model)->forward(ids, 0);
  CHECK(logits.ok()) << logits.status().to_string();
  return std::vector<float>(logits->data<float>(), logits->data<float>() + logits->numel());
}

std::vector<float> to_host(const Tensor& t) {
  std::vector<float> v(t.numel());
  const Status copied = copy_bytes(v.data(), DeviceType::kCPU, t.raw_data(), t.device(), t.nbytes());
  CHECK(copied.ok()) << copied.to_string();
  return v;
}

Tensor to_device(const Tensor& t, Allocator& device) {
  if (t.is_empty()) return Tensor();
  auto copy = t.to(device);
  CHECK(copy.ok()) << copy.status().to_string();
  return std::move(copy).value();
}

op::Weight to_device(const op::Weight& w, Allocator& device) {
  auto placed = weight_on(w, device);
  CHECK(placed.ok()) << placed.status().to_string();
  return std::move(placed).value();
}

float fp16_value(float v) { return fp16_to_float(float_to_fp16(v)); }

op::Weight random_int8_weight(int64_t rows, int64_t cols, int group, std::mt19937& rng) {
  op::Weight w;
  w.values = Tensor::zeros_cpu(DataType::kINT8, {rows, cols}).value();
  w.scales = Tensor::zeros_cpu(DataType::kFP32, {rows * cols / group}).value();
  w.group_size = group;
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> s(0.001f, 0.02f);
  for (int64_t i = 0; i < w.values.numel(); ++i) w.values.data<int8_t>()[i] = static_cast<int8_t>(q(rng));
  for (int64_t i = 0; i < w.scales.numel(); ++i) w.scales.data<float>()[i] = fp16_value(s(rng));
  return w;
}

double perplexity(const Checkpoint& ckpt, const std::vector<int32_t>& text, int32_t bos) {
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, {}).value();
  const int64_t vocab = ckpt.config.vocab_size;
  double nll = 0;
  int64_t scored = 0;
  for (size_t begin = 0; begin < text.size(); begin += 127) {
    std::vector<int32_t> window = {bos};
    window.insert(window.end(), text.begin() + begin, text.begin() + std::min(text.size(), begin + 127));
    const Tensor logits = model->forward_all(window, 0).value();
    for (size_t i = 0; i + 1 < window.size(); ++i) {
      const float* row = logits.data<float>() + i * vocab;
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double{row[v]});
      nll += std::log(sum) - row[window[i + 1]];
      ++scored;
    }
  }
  return std::exp(nll / scored);
}

std::vector<int32_t> tinystories_slice_tokens(const Tokenizer& tokenizer) {
  std::ifstream in(source_path("test/data/tinystories_valid_slice.txt"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto ids = tokenizer.encode(text, {.add_bos = false});
  CHECK(ids.ok()) << ids.status().to_string();
  return std::move(ids).value();
}

op::Weight random_int4_weight(int64_t rows, int64_t cols, int group, bool with_min, std::mt19937& rng) {
  op::Weight w;
  w.values = Tensor::zeros_cpu(DataType::kINT4, {rows, cols / 2}).value();
  w.scales = Tensor::zeros_cpu(DataType::kFP32, {rows * cols / group}).value();
  if (with_min) w.mins = Tensor::zeros_cpu(DataType::kFP32, {rows * cols / group}).value();
  w.group_size = group;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> s(0.001f, 0.02f), m(-0.1f, 0.1f);
  for (int64_t i = 0; i < w.values.numel(); ++i) w.values.data<uint8_t>()[i] = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < w.scales.numel(); ++i) w.scales.data<float>()[i] = fp16_value(s(rng));
  for (int64_t i = 0; with_min && i < w.mins.numel(); ++i) w.mins.data<float>()[i] = fp16_value(m(rng));
  return w;
}

std::string weight_scheme_name(const ::testing::TestParamInfo<WeightScheme>& info) {
  switch (info.param) {
    case WeightScheme::kInt8: return "Int8";
    case WeightScheme::kInt4: return "Int4";
    case WeightScheme::kInt4Min: return "Int4WithMin";
  }
  return "";
}

DataType weight_scheme_dtype(WeightScheme scheme) {
  return scheme == WeightScheme::kInt8 ? DataType::kINT8 : DataType::kINT4;
}

op::Weight random_weight(WeightScheme scheme, int64_t rows, int64_t cols, int group, std::mt19937& rng) {
  return scheme == WeightScheme::kInt8 ? random_int8_weight(rows, cols, group, rng)
                                       : random_int4_weight(rows, cols, group, scheme == WeightScheme::kInt4Min, rng);
}

int int4_code(const op::Weight& w, int64_t r, int64_t c) {
  const int64_t flat = r * w.cols() + c;
  const uint8_t byte = w.values.data<uint8_t>()[flat / 2];
  return flat % 2 == 0 ? byte % 16 : byte / 16;
}

double int4_dequantized(const op::Weight& w, int64_t r, int64_t c) {
  const int64_t group = (r * w.cols() + c) / w.group_size;
  const int q = int4_code(w, r, c);
  const double scale = w.scales.data<float>()[group];
  if (w.mins.is_empty()) return scale * (q - 8);
  return scale * q + w.mins.data<float>()[group];
}

Tensor int8_exact_input(int64_t tokens, int64_t cols, std::mt19937& rng) {
  Tensor in = Tensor::zeros_cpu(DataType::kFP32, {tokens, cols}).value();
  std::uniform_int_distribution<int> q(-127, 127), exponent(-9, -1);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t b = 0; b < cols; b += 32) {
      const float unit = std::ldexp(1.f, exponent(rng));
      for (int64_t c = b; c < std::min(cols, b + 32); ++c) in.data<float>()[t * cols + c] = unit * q(rng);
      in.data<float>()[t * cols + b] = unit * (q(rng) < 0 ? -127 : 127);
    }
  }
  return in;
}

QuantizedProduct quantized_product(const Tensor& in, const op::Weight& w) {
  const int64_t tokens = in.numel() / w.cols(), rows = w.rows(), cols = w.cols();
  const bool int8 = w.dtype() == DataType::kINT8;
  QuantizedProduct ref{std::vector<double>(tokens * rows), std::vector<double>(tokens * rows),
                  std::vector<double>(tokens * rows)};
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = in.data<float>() + t * cols;
    std::vector<double> block_max(cols);
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t k = c / 32 * 32; k < std::min(cols, c / 32 * 32 + 32); ++k) {
        block_max[c] = std::max(block_max[c], std::fabs(double{x[k]}));
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, magnitude = 0, rounding = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t g = (r * cols + c) / w.group_size;
        const double scale = w.scales.data<float>()[g];
        const double wv = int8 ? scale * w.values.data<int8_t>()[r * cols + c] : int4_dequantized(w, r, c);
        const double min = w.mins.is_empty() ? 0 : w.mins.data<float>()[g];
        sum += wv * x[c];
        magnitude += (int8 ? scale * 128 : scale * 16 + std::fabs(min)) * std::fabs(x[c]);
        rounding += std::fabs(wv) * block_max[c] / 254;
      }
      ref.out[t * rows + r] = sum;
      ref.magnitude[t * rows + r] = magnitude;
      ref.input_rounding[t * rows + r] = rounding;
    }
  }
  return ref;
}

void check_cuda_decode_gemv(const op::Weight& w, bool rounds_input, std::mt19937& rng) {
  Allocator& gpu = *cuda_allocator().value();
  const op::Weight gpu_w = to_device(w, gpu);
  const int kernel = static_cast<int>(w.dtype());
  for (const bool exact : {true, false}) {
    const Tensor in = exact ? int8_exact_input(1, w.cols(), rng) : random_tensor({1, w.cols()}, rng);
    Tensor out = to_device(Tensor::zeros_cpu(DataType::kFP32, {1, w.rows()}).value(), gpu);
    const Status s = op::cuda_kernel_table().matmul[kernel](to_device(in, gpu), gpu_w, out, kernel_context(DeviceType::kCUDA));
    ASSERT_TRUE(s.ok()) << s.to_string();
    const std::vector<float> got = to_host(out);
    const QuantizedProduct ref = quantized_product(in, w);
    for (int64_t r = 0; r < w.rows(); ++r) {
      const double rounding = exact ? 0 : ref.input_rounding[r];
      ASSERT_NEAR(got[r], ref.out[r], rounding + 1e-5 * ref.magnitude[r] + 1e-30)
          << "row " << r << (exact ? ", inputs int8 holds" : ", random inputs");
    }
    if (!rounds_input) {
      EXPECT_LT(relative_error(got.data(), ref.out.data(), ref.out.size()), 1e-5);
    }
  }
}

double stories_decode_logit_error(const ModelOptions& options, const ModelOptions& reference) {
  auto ckpt = load_checkpoint(source_path("models/stories260K/stories260K.bin"));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  if (!ckpt.ok()) return INFINITY;
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 54, 71, 260, 300, 9};
  const size_t prompt = tokens.size();
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 512);
  return decode_logit_error(*ckpt, tokens, prompt, options, reference);
}

StatusOr<Checkpoint> handoff_model_checkpoint() {
  LlamaConfig c = model_shape(1024, 3072, 2, 8, 2, 6144, 64);
  c.shared_classifier = false;
  return make_random_checkpoint(c, 5);
}

double handoff_model_decode_error(const Checkpoint& checkpoint, std::optional<DataType> weight_dtype) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 28; ++i) tokens.push_back((i * 977 + 31) % checkpoint.config.vocab_size);
  ModelOptions cpu;
  cpu.weight_dtype = weight_dtype;
  ModelOptions gpu = cpu;
  gpu.device = DeviceType::kCUDA;
  return decode_logit_error(checkpoint, tokens, 12, gpu, cpu);
}

double decode_logit_error(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens, size_t prompt,
                          const ModelOptions& options, const ModelOptions& reference) {
  const int64_t vocab = checkpoint.config.vocab_size;
  auto ref_model = LlamaModel::create(checkpoint.config, checkpoint.weights, reference);
  auto model = LlamaModel::create(checkpoint.config, checkpoint.weights, options);
  EXPECT_TRUE(ref_model.ok() && model.ok());
  if (!ref_model.ok() || !model.ok()) return INFINITY;
  EXPECT_EQ((*model)->weight_dtype(), options.weight_dtype.value_or((*model)->weight_dtype()));
  auto all = (*ref_model)->forward_all(tokens, 0);
  EXPECT_TRUE(all.ok()) << all.status().to_string();
  if (!all.ok()) return INFINITY;
  const std::vector<float> want = to_host(*all);
  double worst = 0;
  for (size_t i = prompt; i <= tokens.size(); ++i) {
    // Logits after token i - 1: the prompt's prefill first, then one forced token at a time.
    auto out = i == prompt ? (*model)->forward(std::span(tokens).first(prompt), 0)
                           : (*model)->forward(std::span(tokens).subspan(i - 1, 1), static_cast<int>(i - 1));
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return INFINITY;
    const std::vector<float> got = to_host(*out);
    worst = std::max(worst, relative_error(got.data(), want.data() + (i - 1) * vocab, vocab));
  }
  return worst;
}

template <typename Ref>
static double relative_error_impl(const float* a, const Ref* b, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    norm += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  if (std::isnan(diff)) return INFINITY;
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

double relative_error(const float* a, const float* b, size_t n) { return relative_error_impl(a, b, n); }
double relative_error(const float* a, const double* b, size_t n) { return relative_error_impl(a, b, n); }

EngineGreedyRun engine_greedy_run(const Checkpoint& c, const ModelOptions& model, const Tokenizer& tokenizer,
                                  bool logits) {
  constexpr int kSequences = 6;
  EngineGreedyRun run;
  run.tokens.resize(kSequences);
  if (logits) run.logits.resize(kSequences);
  std::vector<RequestId> ids(kSequences);
  EngineOptions options{.max_seqs = kSequences, .max_step_rows = 64};
  if (logits) {
    options.observe_logits = [&](RequestId id, int, std::span<const float> values) {
      const size_t i = std::find(ids.begin(), ids.end(), id) - ids.begin();
      run.logits[i].emplace_back(values.begin(), values.end());
    };
  }
  auto engine = Engine::create(c.config, c.weights, model, tokenizer, options);
  CHECK(engine.ok()) << engine.status().to_string();
  for (int i = 0; i < kSequences; ++i) {
    SamplingParams p;
    p.temperature = 0.f;
    p.max_tokens = 40;
    p.ignore_eos = true;
    const std::vector<int32_t> prompt = {1, 403 + i, 407, 261 + 3 * i, 378};
    auto id = (*engine)->submit(prompt, p, [&run, i](const RequestOutput& out) {
      run.tokens[i].insert(run.tokens[i].end(), out.tokens.begin(), out.tokens.end());
    });
    CHECK(id.ok()) << id.status().to_string();
    ids[i] = *id;
  }
  for (;;) {
    auto busy = (*engine)->step();
    CHECK(busy.ok()) << busy.status().to_string();
    if (!*busy) break;
  }
  for (int i = 0; i < kSequences && logits; ++i) CHECK_EQ(run.logits[i].size(), run.tokens[i].size());
  return run;
}

std::vector<double> engine_logit_errors_by_step(const EngineGreedyRun& split, const EngineGreedyRun& whole) {
  std::vector<double> errors;
  for (size_t i = 0; i < whole.logits.size(); ++i) {
    for (size_t t = 0; t < whole.logits[i].size() && t < split.logits[i].size(); ++t) {
      const std::vector<float>& w = whole.logits[i][t];
      if (errors.size() <= t) errors.resize(t + 1, 0.0);
      errors[t] = std::max(errors[t], relative_error(split.logits[i][t].data(), w.data(), w.size()));
      if (split.tokens[i][t] != whole.tokens[i][t]) break;
    }
  }
  return errors;
}

double worst_engine_logit_error(const EngineGreedyRun& split, const EngineGreedyRun& whole) {
  const std::vector<double> errors = engine_logit_errors_by_step(split, whole);
  return errors.empty() ? 0.0 : *std::max_element(errors.begin(), errors.end());
}

}  // namespace kuiper::test
