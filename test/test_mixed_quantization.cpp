// Weights of different quantizations in one model (a GGUF Q4_K_M file: Q4_K as int4 with a
// minimum in groups of 32, Q6_K as int8 in groups of 16): converting between them goes through
// the dequantized values and stays within the target's half step of them; a stack (q|k|v on
// CUDA) takes parts of one quantization only; on the CPU each matrix keeps its own type and the
// model's logits equal those of the same weights dequantized to fp32.
#include <cmath>
#include <random>

#include "kuiper/model/dequantize.h"
#include "kuiper/model/int4_quantize.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/model/weight_convert.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

// Largest |a − b| over two host fp32 tensors.
double max_difference(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(double{a.data<float>()[i]} - b.data<float>()[i]));
  return worst;
}

// Largest (max − min) / 15 over the groups of `values`: the half step that bounds an int4 code.
double largest_int4_step(const Tensor& values, int group) {
  double step = 0;
  for (int64_t g = 0; g < values.numel() / group; ++g) {
    const float* v = values.data<float>() + g * group;
    step = std::max(step, double{*std::max_element(v, v + group)} - *std::min_element(v, v + group));
  }
  return step / 15;
}

TEST(MixedQuantization, Int8GroupsOf16RequantizeToInt4WithinHalfAStep) {
  std::mt19937 rng(3);
  const Tensor w = test::random_tensor({8, 256}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q6k_like, quantize_int8(w, 16));
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q4k_like, quantize_int4(w, 32, Int4Scheme::kWithMin));
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight moved, quantize_like(q6k_like, q4k_like));
  EXPECT_TRUE(same_quantization(moved, q4k_like));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor from, dequantize_weight(q6k_like));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor to, dequantize_weight(moved));
  EXPECT_LE(max_difference(from, to), largest_int4_step(from, 32) / 2 * (1 + 1e-5));
  // Already so quantized: the same values.
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight kept, quantize_like(q4k_like, q4k_like));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor kept_values, dequantize_weight(kept));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor q4k_values, dequantize_weight(q4k_like));
  EXPECT_EQ(max_difference(kept_values, q4k_values), 0.0);
}

TEST(MixedQuantization, Int4ConvertsToInt8ThroughItsValues) {
  std::mt19937 rng(4);
  const Tensor w = test::random_tensor({4, 128}, rng);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q4, quantize_int4(w, 32, Int4Scheme::kSymmetric));
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight q8, convert_weight(q4, DataType::kINT8, cpu_allocator()));
  EXPECT_EQ(q8.dtype(), DataType::kINT8);
  EXPECT_EQ(q8.group_size, kDefaultInt8GroupSize);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor from, dequantize_weight(q4));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor to, dequantize_weight(q8));
  double largest = 0;
  for (int64_t i = 0; i < from.numel(); ++i) largest = std::max(largest, double{std::fabs(from.data<float>()[i])});
  EXPECT_LE(max_difference(from, to), largest / 127 / 2 * (1 + 1e-5));
}

TEST(MixedQuantization, StackRefusesPartsOfDifferentQuantization) {
  std::mt19937 rng(5);
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight symmetric, quantize_int4(test::random_tensor({4, 64}, rng), 32, Int4Scheme::kSymmetric));
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight with_min, quantize_int4(test::random_tensor({4, 64}, rng), 32, Int4Scheme::kWithMin));
  const std::vector<op::Weight> mixed = {symmetric, with_min};
  EXPECT_FALSE(stack_rows(mixed, DataType::kINT4, cpu_allocator()).ok());
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight like, quantize_like(with_min, symmetric));
  const std::vector<op::Weight> alike = {symmetric, like};
  KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight stacked, stack_rows(alike, DataType::kINT4, cpu_allocator()));
  EXPECT_EQ(stacked.rows(), 8);
  EXPECT_TRUE(stacked.mins.is_empty());
}

// A tiny model whose layers are int4 and whose classifier and w2 are int8 in groups of 16 runs
// every matrix in its own type on the CPU: its logits are those of the dequantized weights.
TEST(MixedQuantization, CpuModelKeepsEachMatrixTypeAndMatchesItsDequantizedWeights) {
  LlamaConfig c = test::model_shape(64, 128, 2, 4, 2, 96, 32);
  c.shared_classifier = false;
  std::mt19937 rng(6);
  const auto matrix = [&](int64_t rows, int64_t cols, bool int8) -> op::Weight {
    const Tensor w = test::random_tensor({rows, cols}, rng, -0.2f, 0.2f);
    auto q = int8 ? quantize_int8(w, 16) : quantize_int4(w, 32, Int4Scheme::kWithMin);
    EXPECT_TRUE(q.ok());
    return *q;
  };
  LlamaWeights quantized, plain;
  quantized.token_embedding = matrix(c.vocab_size, c.dim, false);
  quantized.classifier = matrix(c.vocab_size, c.dim, true);
  KUIPER_ASSERT_OK_AND_ASSIGN(quantized.final_norm, Tensor::zeros_cpu(DataType::kFP32, {c.dim}));
  for (int64_t i = 0; i < c.dim; ++i) quantized.final_norm.data<float>()[i] = 1.f;
  quantized.layers.resize(c.n_layers);
  const int64_t kv = c.kv_dim();
  for (LlamaLayerWeights& l : quantized.layers) {
    l.wq = matrix(c.dim, c.dim, false);
    l.wk = matrix(kv, c.dim, false);
    l.wv = matrix(kv, c.dim, true);
    l.wo = matrix(c.dim, c.dim, false);
    l.w1 = matrix(c.hidden_dim, c.dim, false);
    l.w2 = matrix(c.dim, c.hidden_dim, true);
    l.w3 = matrix(c.hidden_dim, c.dim, false);
    l.attention_norm = quantized.final_norm;
    l.ffn_norm = quantized.final_norm;
  }
  plain = quantized;
  const auto dequantized = [](op::Weight& w) {
    auto values = dequantize_weight(w);
    ASSERT_TRUE(values.ok());
    w = op::Weight{*values, Tensor(), 0};
  };
  dequantized(plain.token_embedding);
  dequantized(plain.classifier);
  for (LlamaLayerWeights& l : plain.layers) {
    for (op::Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) dequantized(*w);
  }
  KUIPER_ASSERT_OK_AND_ASSIGN(auto mixed_model, LlamaModel::create(c, quantized, {}));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto plain_model, LlamaModel::create(c, plain, {}));
  EXPECT_EQ(mixed_model->weight_dtype(), DataType::kINT4);
  const std::vector<int32_t> tokens = {1, 5, 9, 42, 7};
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor mixed_logits, mixed_model->forward_all(tokens, 0));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor plain_logits, plain_model->forward_all(tokens, 0));
  double largest = 0;
  for (int64_t i = 0; i < plain_logits.numel(); ++i) largest = std::max(largest, double{std::fabs(plain_logits.data<float>()[i])});
  // Prefill and decode quantize the int4 matmuls' inputs to int8 in blocks of 32 (with AVX2;
  // without, prefill multiplies dequantized panels in fp32).
  EXPECT_LE(max_difference(mixed_logits, plain_logits), 5e-2 * largest);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto decode_model, LlamaModel::create(c, quantized, {}));
  for (size_t i = 0; i < tokens.size(); ++i) {
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor row, decode_model->forward(std::span<const int32_t>(&tokens[i], 1), static_cast<int>(i)));
    double worst = 0;
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      worst = std::max(worst, std::fabs(double{row.data<float>()[v]} - plain_logits.data<float>()[i * c.vocab_size + v]));
    }
    EXPECT_LE(worst, 5e-2 * largest) << "position " << i;
  }
}

}  // namespace
}  // namespace kuiper
