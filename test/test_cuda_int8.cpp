// CUDA int8 kernels against the CPU int8 kernels (themselves checked against double references
// in test_int8_kernels.cpp), on the same random int8 weights, and an int8 model on CUDA against
// the same int8 model on the CPU. Skips when no GPU can be used.
// Bounds: the decode GEMV of tall matrices (over 4096 rows: decode_gemv.cu, kInt8ShortRowsUpTo)
// multiplies in integers with x quantized to int8 in blocks of 32: per output, against double
// products of the dequantized weights, 1e-5 of the magnitude of the summed terms on inputs int8
// holds exactly, plus test::QuantizedProduct's input-rounding bound on random ones. Short
// matrices multiply in integers too where a model hands x on quantized (QuantizedHandoffs), and
// in fp32 when called with fp32 x alone, as here (and rows the integer reader cannot take): 1e-5
// relative L2.
// Prefill 1e-2 relative L2 (weights dequantized to bf16 and activations rounded to bf16 for the
// tensor cores); the model's logits 2e-2 (CudaInt8Model says why). The decode GEMV's speed is
// measured by tools/cuda_kernels_bench.cu, not here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kuiper/base/device.h"
#include "kuiper/generation/session.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/op/kernel_table.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

// Kernels called directly run in the test program's context (CPU kernels ignore it).
const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCUDA); }

using test::random_int8_weight;

constexpr int kInt8 = static_cast<int>(DataType::kINT8);

class CudaInt8 : public test::GpuTest<> {
 protected:
  Tensor download(const Tensor& t) { return t.to(cpu_allocator()).value(); }

  // CUDA result vs CPU result of in[T, cols] · Wᵀ.
  double matmul_error(int64_t rows, int64_t cols, int group, int64_t tokens) {
    const op::Weight w = random_int8_weight(rows, cols, group, rng_);
    const Tensor in = test::random_tensor({tokens, cols}, rng_);
    Tensor cpu_out = Tensor::zeros_cpu(DataType::kFP32, {tokens, rows}).value();
    Tensor gpu_out = upload(cpu_out);
    Tensor gpu_in = upload(in);
    const op::Weight gpu_w = upload(w);
    EXPECT_TRUE(op::cpu_kernel_table().matmul[kInt8](in, w, cpu_out, ctx()).ok());
    const Status s = op::cuda_kernel_table().matmul[kInt8](gpu_in, gpu_w, gpu_out, ctx());
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(synchronize(nullptr).ok());
    const Tensor back = download(gpu_out);
    return test::relative_error(back.data<float>(), cpu_out.data<float>(), back.numel());
  }

  std::mt19937 rng_{4};
};

// The decode GEMV of a random weight within the bounds above (test::check_cuda_decode_gemv).
// quantizes: whether x is rounded to int8 (else fp32 throughout).
void check_decode_gemv(int64_t rows, int64_t cols, int group, bool quantizes, std::mt19937& rng) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", groups of " + std::to_string(group));
  test::check_cuda_decode_gemv(random_int8_weight(rows, cols, group, rng), quantizes, rng);
}

TEST_F(CudaInt8, DecodeGemvMatchesDoubleReference) {
  check_decode_gemv(7, 64, 64, false, rng_);         // short matrices: odd rows
  check_decode_gemv(33, 128, 32, false, rng_);       // several groups per row
  check_decode_gemv(4096, 4096, 64, false, rng_);    // a LLaMA-sized matrix
  check_decode_gemv(11, 4096, 128, false, rng_);     // long rows: several batches per lane
  check_decode_gemv(64, 172, 64, false, rng_);       // groups across rows: scalar reader
  check_decode_gemv(6, 40, 8, false, rng_);          // group below 16: scalar reader
  check_decode_gemv(4097, 256, 64, true, rng_);      // tall: x in integers, a part-filled last block
  check_decode_gemv(6144, 4096, 64, true, rng_);     // LLaMA-3-8B's q|k|v
  check_decode_gemv(8200, 256, 64, true, rng_);      // and past 8192 rows, a part-filled last block
  check_decode_gemv(8200, 4096, 32, true, rng_);     // LLaMA-wide rows, groups of 32
  check_decode_gemv(8193, 11008, 128, true, rng_);   // x quantized in rounds, several bursts per lane
  check_decode_gemv(8193, 32768, 64, true, rng_);    // the longest rows whose int8 x fits shared memory
  check_decode_gemv(8193, 32832, 64, false, rng_);   // longer: scalar reader
  check_decode_gemv(8200, 1040, 16, false, rng_);    // groups of 16: scalar reader
}

// A NaN input reaches every output of the tall decode GEMV, as it does in fp32 products (the
// int8 quantization of x must not round it to 0 and go on).
TEST_F(CudaInt8, DecodeGemvPropagatesNaN) {
  const op::Weight w = upload(random_int8_weight(8200, 256, 64, rng_));
  Tensor in = test::random_tensor({1, 256}, rng_);
  in.data<float>()[100] = std::nanf("");
  Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {1, 8200}).value());
  KUIPER_ASSERT_OK(op::cuda_kernel_table().matmul[kInt8](upload(in), w, out, ctx()));
  const std::vector<float> got = test::to_host(out);
  for (size_t r = 0; r < got.size(); ++r) ASSERT_TRUE(std::isnan(got[r])) << "row " << r << ": " << got[r];
}

TEST_F(CudaInt8, PrefillMatchesCpu) {
  EXPECT_LT(matmul_error(300, 128, 32, 17), 1e-2);
  EXPECT_LT(matmul_error(64, 172, 64, 5), 1e-2);
  EXPECT_LT(matmul_error(1024, 768, 64, 128), 1e-2);
  EXPECT_LT(matmul_error(6, 40, 8, 5), 1e-2);  // group below 16: weights dequantized one at a time
  EXPECT_LT(matmul_error(7, 40, 8, 3), 1e-2);  // and a count not a multiple of 16
}

TEST_F(CudaInt8, RefusesMalformedWeights) {
  op::Weight w = upload(random_int8_weight(4, 64, 64, rng_));
  w.group_size = 32;  // would need twice the scales
  Tensor in = upload(test::random_tensor({1, 64}, rng_));
  Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {1, 4}).value());
  EXPECT_FALSE(op::cuda_kernel_table().matmul[kInt8](in, w, out, ctx()).ok());
}

TEST_F(CudaInt8, EmbeddingMatchesCpuAndZeroesBadIds) {
  const op::Weight table = random_int8_weight(10, 24, 16, rng_);  // groups cross rows
  Tensor ids = Tensor::zeros_cpu(DataType::kINT32, {3}).value();
  ids.data<int32_t>()[0] = 9;
  ids.data<int32_t>()[1] = 0;
  ids.data<int32_t>()[2] = 5;
  Tensor cpu_out = Tensor::zeros_cpu(DataType::kFP32, {3, 24}).value();
  ASSERT_TRUE(op::cpu_kernel_table().embedding[kInt8](ids, table, cpu_out, ctx()).ok());
  Tensor gpu_out = upload(cpu_out);
  ids.data<int32_t>()[1] = 10;  // out of range on the GPU: a zero row
  Tensor gpu_ids = upload(ids);
  ASSERT_TRUE(op::cuda_kernel_table().embedding[kInt8](gpu_ids, upload(table), gpu_out, ctx()).ok());
  const Tensor back = download(gpu_out);
  for (int c = 0; c < 24; ++c) {
    EXPECT_EQ(back.data<float>()[c], cpu_out.data<float>()[c]);
    EXPECT_EQ(back.data<float>()[24 + c], 0.f);
    EXPECT_EQ(back.data<float>()[48 + c], cpu_out.data<float>()[48 + c]);
  }
}

// stories260K quantized to int8 at load (groups of 64), on CUDA against the CPU. Both read the
// same int8 weights; what differs is rounding on CUDA: its KV cache is bf16 (the CPU's fp32), its
// prefill GEMM rounds activations to bf16 for the tensor cores, and its decode GEMVs multiply x
// handed on quantized to int8 in blocks of 32 (the CPU multiplies fp32 x). Each bf16 rounding is
// a relative error of at most 2^-9 (≈ 2e-3) on a value that feeds the residual stream; with 5
// layers and those 2 roundings per layer adding up in the worst case, 5 x 2 x 2^-9 ≈ 2e-2, the
// bound used. The int8 x moves each input by at most 1/254 of its block's largest value; the
// bound is the one the int8 model is held to with it (the condition under which x is rounded at all), and
// the logits stay well inside it (docs/performance.md).
class CudaInt8Model : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
    auto ckpt = load_checkpoint(test::source_path("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    ckpt_ = std::move(ckpt).value();
  }
  static ModelOptions int8_options(DeviceType device) {
    ModelOptions options;
    options.device = device;
    options.weight_dtype = DataType::kINT8;
    return options;
  }
  std::unique_ptr<LlamaModel> int8_model(DeviceType device) {
    auto model = LlamaModel::create(ckpt_.config, ckpt_.weights, int8_options(device));
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    return model.ok() ? std::move(model).value() : nullptr;
  }
  Checkpoint ckpt_;
};

// A scale fp16 cannot hold (the GPU's dtype for scales, op/weight_groups.h) in a file's int8
// matrix: the CUDA model is refused with the matrix named; the CPU model, whose scales are fp32,
// loads it.
TEST_F(CudaInt8Model, RefusesAScaleBeyondFp16NamingTheMatrix) {
  KUIPER_ASSERT_OK_AND_ASSIGN(ckpt_.weights.layers[1].w2, quantize_int8(ckpt_.weights.layers[1].w2.values, 64));
  ckpt_.weights.layers[1].w2.scales.data<float>()[2] = 1e5f;
  const auto refused = LlamaModel::create(ckpt_.config, ckpt_.weights, int8_options(DeviceType::kCUDA));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(refused.status().message().find("layer 1 w2: weight "), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("scales: 100000 at group 2 is beyond fp16's range"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(LlamaModel::create(ckpt_.config, ckpt_.weights, int8_options(DeviceType::kCPU)).ok());
}

// Prefill a prompt, then decode 40 forced tokens: the logits after each call, CUDA against CPU.
TEST_F(CudaInt8Model, LogitsMatchCpu) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 54, 71, 260, 300, 9};
  std::vector<int32_t> forced;
  for (int i = 0; i < 40; ++i) forced.push_back((i * 37 + 11) % 512);
  std::vector<std::vector<float>> logits[2];
  for (int d = 0; d < 2; ++d) {
    auto model = int8_model(d == 0 ? DeviceType::kCPU : DeviceType::kCUDA);
    ASSERT_NE(model, nullptr);
    ASSERT_EQ(model->weight_dtype(), DataType::kINT8);
    auto out = model->forward(prompt, 0);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    logits[d].push_back(test::to_host(*out));
    int pos = static_cast<int>(prompt.size());
    for (int32_t t : forced) {
      const int32_t one[1] = {t};
      out = model->forward(one, pos++);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      logits[d].push_back(test::to_host(*out));
    }
  }
  double worst = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    worst = std::max(worst, test::relative_error(logits[1][i].data(), logits[0][i].data(),
                                                 logits[0][i].size()));
  }
  std::printf("int8 model, CUDA against CPU: worst relative logit error %.3g (bound 2e-2)\n", worst);
  EXPECT_LT(worst, 2e-2);
}

// Greedy decoding from "Once upon a time", 100 tokens, through the engine on the CPU and on
// CUDA. The logits differ by rounding, as above, so the two texts may part where two tokens are
// within that rounding of each other, and only there: they agree up to the first token where
// they part, and at that token the CPU ranks CUDA's pick at most √2 · 2e-2 · ‖CPU logits‖₂ below
// its own (two logits move apart by at most |e_i| + |e_j| ≤ √2 ‖e‖₂, and LogitsMatchCpu bounds
// ‖e‖₂ by 2e-2 of the logits' norm). A generation path that fed CUDA the wrong token or
// position would pick tokens the CPU ranks far below its own.
TEST_F(CudaInt8Model, GreedyStoryFollowsCpu) {
  constexpr int kTokens = 100;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer,
                              load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto ids, tokenizer->encode("Once upon a time"));
  std::vector<int32_t> story[2];
  for (int d = 0; d < 2; ++d) {
    KUIPER_ASSERT_OK_AND_ASSIGN(auto engine, Engine::create(ckpt_.config, ckpt_.weights,
                                                            int8_options(d == 0 ? DeviceType::kCPU : DeviceType::kCUDA),
                                                            *tokenizer, {.max_seqs = 1}));
    Session session(*engine, {.temperature = 0.f});
    KUIPER_ASSERT_OK(session.generate(ids, {.max_new_tokens = kTokens, .ignore_eos = true},
                                      [](std::string_view) { return true; }).status());
    story[d] = session.tokens();
  }
  ASSERT_EQ(story[0].size(), ids.size() + kTokens);
  ASSERT_EQ(story[1].size(), story[0].size());
  size_t agree = ids.size();
  while (agree < story[0].size() && story[0][agree] == story[1][agree]) ++agree;
  std::printf("int8 greedy: CUDA and CPU agree on %zu of %d tokens\n", agree - ids.size(), kTokens);
  if (agree == story[0].size()) return;
  // The CPU's logits after the tokens both chose.
  auto cpu = int8_model(DeviceType::kCPU);
  ASSERT_NE(cpu, nullptr);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor logits, cpu->forward(std::span(story[0]).first(agree), 0));
  const std::vector<float> l = test::to_host(logits);
  double norm = 0;
  for (float v : l) norm += static_cast<double>(v) * v;
  const double below = l[story[0][agree]] - l[story[1][agree]], bound = std::sqrt(2.0) * 2e-2 * std::sqrt(norm);
  std::printf("where they part, the CPU ranks CUDA's token %.4g below its own (near-tie bound %.4g)\n", below, bound);
  EXPECT_LE(below, bound);
}

// test::handoff_model_checkpoint in int8, whose matrices, tall and short, multiply in integers
// with x handed on quantized in halves (llama_model.h, QuantizedHandoffs): wo's accumulate goes
// into w1|w3 (hidden 3072: 6144 rows) and the last w2's into the classifier (vocab 6144); its
// q|k|v (1536 rows) and w2 (1024) are short. Quantized at load (groups of 64, the same for both
// models); CUDA decode against CPU prefill, bound as above.
TEST(CudaInt8Handoffs, QuantizedHandoffsMatchCpuPrefill) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  KUIPER_ASSERT_OK_AND_ASSIGN(const Checkpoint random, test::handoff_model_checkpoint());
  const double worst = test::handoff_model_decode_error(random, DataType::kINT8);
  std::printf("int8 model with x handed on quantized, CUDA decode against CPU prefill: worst relative logit "
              "error %.3g (bound 2e-2)\n", worst);
  EXPECT_LT(worst, 2e-2);
}

}  // namespace
}  // namespace kuiper
