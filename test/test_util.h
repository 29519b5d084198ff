// Shared helpers for the test programs: paths to bundled data and random tensors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kuiper/base/device.h"
#include "kuiper/checkpoint/load_checkpoint.h"
#include "kuiper/op/execution_context.h"
#include "kuiper/op/weight.h"
#include "kuiper/tensor/tensor.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper {
struct ModelOptions;  // model/llama_model.h
}

namespace kuiper::test {

// Absolute path of a file under the source tree, e.g. source_path("models/stories260K/...").
std::string source_path(const std::string& relative);
// A fresh scratch directory under the build tree for files a test writes, private to the
// running test.
std::string scratch_dir(const std::string& name);

// The whole of a file (empty when it cannot be read), and a file written whole: for tests that
// corrupt, truncate or assemble files byte by byte.
std::vector<char> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<char>& bytes);

// Expects load_checkpoint(path, options) to refuse the file with a one-line message that names
// `message_part`.
void expect_load_refused(const std::string& path, const std::string& message_part, const LoadOptions& options = {});

// `tensors` and `metadata` written as a safetensors file at `path`: for tests that assemble
// damaged or unusual files.
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<std::pair<std::string, Tensor>>& tensors);

// The logits after the last of `ids`, from a fresh default (CPU) model of `ckpt`: for checking
// that two ways of loading a model give the same one.
std::vector<float> last_logits(const Checkpoint& ckpt, const std::vector<int32_t>& ids);

// An execution context on `device` for calling kernels directly, one per device and test
// program, with scratch larger than any shape the kernel tests use (no model sizes it for them).
const op::ExecutionContext& kernel_context(DeviceType device);

// The shape of a random-weight test model (other fields at their defaults).
LlamaConfig model_shape(int dim, int hidden_dim, int layers, int heads, int kv_heads, int vocab, int max_seq_len);

// fp32 CPU tensor with values uniform in [lo, hi).
Tensor random_tensor(const Shape& shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f);

// The elements of an fp32 tensor on any device, copied to the host (waits for queued work).
std::vector<float> to_host(const Tensor& t);

// A copy in `device`'s memory (an empty tensor stays empty), and a weight placed there as a
// model places it (model/weight_placement.h: group constants in the device's dtype): what the
// CUDA tests hand the GPU kernels.
Tensor to_device(const Tensor& t, Allocator& device);
op::Weight to_device(const op::Weight& w, Allocator& device);

// The base of CUDA test fixtures (Base: ::testing::Test, or ::testing::TestWithParam<P>): skips
// the test where no GPU can be used, and copies tensors and weights to the GPU.
template <typename Base = ::testing::Test>
class GpuTest : public Base {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
    gpu_ = cuda_allocator().value();
  }
  Tensor upload(const Tensor& t) { return to_device(t, *gpu_); }
  op::Weight upload(const op::Weight& w) { return to_device(w, *gpu_); }

  Allocator* gpu_ = nullptr;
};

// `v` rounded to the nearest fp16 value: group constants that the CUDA kernels' fp16 holds
// exactly, so that they multiply by the very weights a host reference does.
float fp16_value(float v);

// An int8 weight with random values in [-127, 127] and scales in [0.001, 0.02) (fp16 values).
op::Weight random_int8_weight(int64_t rows, int64_t cols, int group, std::mt19937& rng);

// An int4 weight with random nibbles, scales in [0.001, 0.02) and, when `with_min`, mins in
// [-0.1, 0.1) (fp16 values).
op::Weight random_int4_weight(int64_t rows, int64_t cols, int group, bool with_min, std::mt19937& rng);

// The quantized weight schemes, for tests parameterized over each.
enum class WeightScheme { kInt8, kInt4, kInt4Min };
inline constexpr WeightScheme kWeightSchemes[] = {WeightScheme::kInt8, WeightScheme::kInt4, WeightScheme::kInt4Min};
// "Int8", "Int4", "Int4WithMin": the test names' suffixes.
std::string weight_scheme_name(const ::testing::TestParamInfo<WeightScheme>& info);
DataType weight_scheme_dtype(WeightScheme scheme);
// random_int8_weight or random_int4_weight, as `scheme` says.
op::Weight random_weight(WeightScheme scheme, int64_t rows, int64_t cols, int group, std::mt19937& rng);

// The nibble (0-15) stored for weight [r, c] of a host int4 weight, decoded here from the layout
// op/int4_weight.h describes (not with the library's helpers): an independent reference.
int int4_code(const op::Weight& w, int64_t r, int64_t c);
// Weight [r, c] of a host int4 weight as the double it stands for (int4_code with its group's
// scale and minimum).
double int4_dequantized(const op::Weight& w, int64_t r, int64_t c);

// Inputs [tokens, cols] that int8 blocks of 32 columns hold exactly (each block is a power of
// two times integers in [-127, 127], one of them ±127): a decode GEMV that quantizes its input
// to int8 as llama.cpp's Q8_0 does (the int4 ones) then rounds nothing but its fp32 sums.
Tensor int8_exact_input(int64_t tokens, int64_t cols, std::mt19937& rng);

// in[T, cols] · dequant(W)ᵀ for a host int8 or int4 weight, in double, with what bounds a
// kernel's error.
struct QuantizedProduct {
  std::vector<double> out;        // Σ dequant(W[r, c]) · x[c]
  // Σ (scale · 16 + |min|) · |x[c]| (int4), Σ scale · 128 · |x[c]| (int8): the size of what a
  // kernel sums
  std::vector<double> magnitude;
  // Σ |W[r, c]| · (max|x| of c's block of 32) / 254: the most that rounding x to int8 in blocks
  // of 32 (scale max|x| / 127, half a step per input) can move the product.
  std::vector<double> input_rounding;
};
QuantizedProduct quantized_product(const Tensor& in, const op::Weight& w);

// The CUDA decode GEMV (the matmul of one token) of host int8 or int4 weight `w`, on inputs int8
// holds exactly and on random ones, against quantized_product: per output within 1e-5 of the
// summed magnitude, plus on random inputs the input-rounding bound; where the kernel multiplies
// fp32 inputs (`rounds_input` false), also within 1e-5 relative L2 over all outputs.
void check_cuda_decode_gemv(const op::Weight& w, bool rounds_input, std::mt19937& rng);

// `checkpoint` as `options` loads it, given tokens[0, prompt) as one prefill and then the rest
// one at a time (the decode path): the worst relative L2 error of its logits at those positions
// against one prefill of all the tokens by the model `reference` loads. Fails the test (and
// returns infinity) where a model cannot be made or run, or loads another weight dtype.
double decode_logit_error(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens, size_t prompt,
                          const ModelOptions& options, const ModelOptions& reference);

// decode_logit_error of stories260K: a 10-token prompt, then 40 forced tokens.
double stories_decode_logit_error(const ModelOptions& options, const ModelOptions& reference);

// A random model shaped so that the CUDA decode kernels of int8 and int4 weights hand x on
// quantized (llama_model.h, QuantizedHandoffs), which stories260K's (head_dim 8, hidden 172,
// vocab 512) do not: dim 1024, hidden 3072, 2 layers, 8 heads of 128 (2 KV heads), vocab 6144,
// its own classifier.
StatusOr<Checkpoint> handoff_model_checkpoint();
// decode_logit_error of that model (or of a conversion of it) with `weight_dtype` weights on
// CUDA against the CPU (unset: each device's default): a 12-token prompt, then 16 forced tokens.
double handoff_model_decode_error(const Checkpoint& checkpoint, std::optional<DataType> weight_dtype);

// Six sequences run together through an Engine over `model` (prompts {1, 403 + i, 407,
// 261 + 3i, 378}, 40 greedy tokens each, EOS ignored): a prefill step, then batched decode steps.
// For checking that a way of running the model (split over ranks) keeps its text.
struct EngineGreedyRun {
  std::vector<std::vector<int32_t>> tokens;               // per sequence
  std::vector<std::vector<std::vector<float>>> logits;    // per sequence, per token; with logits only
};
// With `logits` the engine hands each step's logits to the host and picks there (its
// observe_logits path); without, the tokens are picked on the device.
EngineGreedyRun engine_greedy_run(const Checkpoint& c, const ModelOptions& model, const Tokenizer& tokenizer,
                                  bool logits = false);

// At each step, the worst relative L2 error of `split`'s logits against `whole`'s over the
// sequences, each counted up to and including the first step where their tokens differ.
std::vector<double> engine_logit_errors_by_step(const EngineGreedyRun& split, const EngineGreedyRun& whole);
// The worst of them.
double worst_engine_logit_error(const EngineGreedyRun& split, const EngineGreedyRun& whole);

// ‖a − b‖₂ / ‖b‖₂ over n elements (b is the reference).
double relative_error(const float* a, const float* b, size_t n);
double relative_error(const float* a, const double* b, size_t n);

// Perplexity of a fresh default (CPU) model of `ckpt` on `text` (token ids without BOS), over
// windows of 128 tokens each starting with `bos`: for checking what quantization costs.
double perplexity(const Checkpoint& ckpt, const std::vector<int32_t>& text, int32_t bos);

// test/data/tinystories_valid_slice.txt encoded by `tokenizer` (no BOS).
std::vector<int32_t> tinystories_slice_tokens(const Tokenizer& tokenizer);

// Unwraps a StatusOr in a test, failing with its message.
#define KUIPER_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  KUIPER_ASSERT_OK_AND_ASSIGN_IMPL(KUIPER_CONCAT(kuiper_test_so_, __COUNTER__), lhs, expr)
#define KUIPER_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  ASSERT_TRUE(tmp.ok()) << tmp.status().to_string();     \
  lhs = std::move(tmp).value()
#define KUIPER_ASSERT_OK(expr)                                     \
  do {                                                             \
    ::kuiper::Status kuiper_test_st_ = (expr);                     \
    ASSERT_TRUE(kuiper_test_st_.ok()) << kuiper_test_st_.to_string(); \
  } while (0)

}  // namespace kuiper::test
