// The multi-token GEMV for int8/int4 weights (multi_token_gemv.cu: batched decode of 2-8 tokens,
// and of up to 32 for weights the tensor-core GEMM does not tile; it quantizes its input to int8
// in blocks of 32 and multiplies in integers), called directly, against double-precision
// products of the dequantized weights (test::quantized_product), and against the one-token decode
// GEMV. Skips when no GPU can be used.
// Bounds, per output:
//  - against the double product: test::QuantizedProduct's input rounding (what rounding x to
//    int8 in blocks of 32 can move the product by) plus 1e-5 of the magnitude of the summed
//    terms (fp32 rounding of the sums); on inputs int8 holds exactly the rounding term is 0, so
//    a misplaced input, weight or scale shows at once.
//  - against T one-token GEMVs: 1e-5 of the magnitude. For int4 both quantize x alike and differ
//    only in the order of their fp32 sums; the one-token int8 GEMV multiplies in fp32 without
//    quantizing x, so for int8 the inputs are ones int8 holds exactly.
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "kuiper/base/device.h"
#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"
#include "test/test_util.h"

namespace kuiper {
namespace {

const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCUDA); }

// The tokens tried: one tile of 2, 4 (one token past the end) and 8 (three past), and several
// tiles of 8, the last part-filled (13) or full (32, the most the GEMV takes).
constexpr int64_t kTokenCounts[] = {2, 3, 5, 8, 13, 32};

class CudaMultiTokenGemv : public test::GpuTest<::testing::TestWithParam<test::WeightScheme>> {
 protected:
  DataType dtype() const { return test::weight_scheme_dtype(GetParam()); }
  op::Weight random_weight(int64_t rows, int64_t cols, int group) {
    return test::random_weight(GetParam(), rows, cols, group, rng_);
  }

  // The CUDA result of in[T, cols] · Wᵀ: the multi-token GEMV for T > 1, the kernel table's
  // matmul (the decode GEMV) for one token.
  std::vector<float> matmul(const Tensor& in, const op::Weight& gpu_w) {
    const int64_t tokens = in.numel() / gpu_w.cols();
    Tensor out = upload(Tensor::zeros_cpu(DataType::kFP32, {tokens, gpu_w.rows()}).value());
    const Tensor gpu_in = upload(in);
    if (tokens > 1) EXPECT_TRUE(op::cuda::multi_token_gemv_fits(gpu_in, gpu_w));
    const Status s = tokens > 1 ? op::cuda::multi_token_gemv(gpu_in, gpu_w, out, ctx())
                                : op::cuda_kernel_table().matmul[static_cast<int>(dtype())](gpu_in, gpu_w, out, ctx());
    EXPECT_TRUE(s.ok()) << s.to_string();
    return test::to_host(out);
  }

  // Every T of kTokenCounts, on exact and on random inputs, against the double product.
  void check_against_double(int64_t rows, int64_t cols, int group) {
    const op::Weight w = random_weight(rows, cols, group);
    const op::Weight gpu_w = upload(w);
    for (const int64_t tokens : kTokenCounts) {
      for (const bool exact : {true, false}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", groups of " + std::to_string(group) +
                     ", " + std::to_string(tokens) + " tokens" + (exact ? ", inputs int8 holds" : ", random inputs"));
        const Tensor in = exact ? test::int8_exact_input(tokens, cols, rng_) : test::random_tensor({tokens, cols}, rng_);
        const std::vector<float> out = matmul(in, gpu_w);
        const test::QuantizedProduct ref = test::quantized_product(in, w);
        ASSERT_EQ(out.size(), ref.out.size());
        for (size_t i = 0; i < out.size(); ++i) {
          const double rounding = exact ? 0 : ref.input_rounding[i];
          ASSERT_NEAR(out[i], ref.out[i], rounding + 1e-5 * ref.magnitude[i] + 1e-30)
              << "token " << i / rows << ", row " << i % rows;
        }
      }
    }
  }

  // Every T of kTokenCounts: the T-token result against T one-token calls (the decode GEMV).
  void check_against_one_token(int64_t rows, int64_t cols, int group) {
    const op::Weight w = random_weight(rows, cols, group);
    const op::Weight gpu_w = upload(w);
    for (const int64_t tokens : kTokenCounts) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", " + std::to_string(tokens) + " tokens");
      const Tensor in = GetParam() == test::WeightScheme::kInt8 ? test::int8_exact_input(tokens, cols, rng_)
                                                                : test::random_tensor({tokens, cols}, rng_);
      const std::vector<float> together = matmul(in, gpu_w);
      const test::QuantizedProduct ref = test::quantized_product(in, w);
      for (int64_t t = 0; t < tokens; ++t) {
        Tensor one = Tensor::zeros_cpu(DataType::kFP32, {1, cols}).value();
        std::copy_n(in.data<float>() + t * cols, cols, one.data<float>());
        const std::vector<float> alone = matmul(one, gpu_w);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_NEAR(together[t * rows + r], alone[r], 1e-5 * ref.magnitude[t * rows + r] + 1e-30)
              << "token " << t << ", row " << r;
        }
      }
    }
  }

  std::mt19937 rng_{11};
};

TEST_P(CudaMultiTokenGemv, MatchesDoubleReference) {
  check_against_double(7, 64, 32);       // fewer rows than a block, two units a row
  check_against_double(33, 160, 32);     // cols not a multiple of 64: a lane's last burst part-filled
  check_against_double(96, 288, 64);     // GQA k/v: groups across rows, units within them
  check_against_double(1216, 1024, 128); // stacked q/k/v of a GQA model (1024 + 96 + 96 rows)
  check_against_double(300, 4096, 128);  // long rows: several bursts per lane
  check_against_double(11, 11008, 64);   // LLaMA-2-7B's down projection width
}

TEST_P(CudaMultiTokenGemv, EqualsOneTokenGemvs) {
  check_against_one_token(50, 256, 32);
  check_against_one_token(1030, 4096, 64);  // LLaMA-wide rows, a part-filled last block
}

// A NaN input reaches every output of its own token and of no other: tokens share weight loads,
// not sums.
TEST_P(CudaMultiTokenGemv, NaNStaysInItsToken) {
  const op::Weight gpu_w = upload(random_weight(40, 256, 32));
  Tensor in = test::random_tensor({5, 256}, rng_);
  in.data<float>()[256 + 37] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> out = matmul(in, gpu_w);
  for (int64_t t = 0; t < 5; ++t) {
    for (int64_t r = 0; r < 40; ++r) {
      EXPECT_EQ(std::isnan(out[t * 40 + r]), t == 1) << "token " << t << ", row " << r << ": " << out[t * 40 + r];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, CudaMultiTokenGemv,
                         testing::ValuesIn(test::kWeightSchemes), test::weight_scheme_name);

}  // namespace
}  // namespace kuiper
