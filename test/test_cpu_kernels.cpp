// Every CPU kernel, called through kernel_table(kCPU) so that the table wiring is tested too,
// against a naive double-precision reference written here. Sizes are deliberately not multiples
// of SIMD widths (1, 7, 67, 130, 333) and cover T = 1 (decode) and T > 1 (prefill).
//
// Tolerances (relative error ‖got − ref‖ / ‖ref‖):
//  - 1e-5 where the kernel accumulates in fp32 over up to a few hundred terms (matmul, rmsnorm,
//    attention); half-precision weights are compared against their exactly decoded values, so
//    fp16/bf16 matmuls get the same bound;
//  - 1e-6 for per-element arithmetic (rope, swiglu, add);
//  - exact for pure data movement (embedding, kv_store, argmax).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kuiper/base/half.h"
#include "kuiper/op/kernel_table.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

// Kernels called directly run in the test program's context.
const op::ExecutionContext& ctx() { return test::kernel_context(DeviceType::kCPU); }

using op::AttentionShape;
using op::Weight;
using test::random_tensor;
using test::relative_error;

constexpr double kAccumulatedTolerance = 1e-5;
constexpr double kElementwiseTolerance = 1e-6;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const op::KernelTable& cpu() { return op::kernel_table(DeviceType::kCPU); }
int at(DataType dtype) { return static_cast<int>(dtype); }

Tensor int_tensor(const std::vector<int32_t>& values) {
  auto t = Tensor::zeros_cpu(DataType::kINT32, {static_cast<int64_t>(values.size())});
  CHECK(t.ok());
  if (!values.empty()) std::memcpy(t->raw_data(), values.data(), values.size() * sizeof(int32_t));
  return std::move(t).value();
}

Tensor zeros(const Shape& shape, DataType dtype = DataType::kFP32) {
  auto t = Tensor::zeros_cpu(dtype, shape);
  CHECK(t.ok());
  return std::move(t).value();
}

std::vector<double> as_double(const Tensor& t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

// Widening written here rather than taken from half.h: _Float16 for fp16, a shift for bf16.
double widen(uint16_t bits, DataType dtype) {
  if (dtype == DataType::kBF16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    return f;
  }
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<double>(h);
}

Weight unquantized(Tensor values) {
  Weight weight;
  weight.values = std::move(values);
  return weight;
}

// A random [rows, cols] weight of `dtype`; `exact` receives the values the kernel should use.
Weight random_weight(DataType dtype, int64_t rows, int64_t cols, std::mt19937& rng,
                     std::vector<double>& exact) {
  const Tensor values = random_tensor({rows, cols}, rng);
  exact = as_double(values);
  if (dtype == DataType::kFP32) return unquantized(values);
  Tensor stored = zeros({rows, cols}, dtype);
  for (int64_t i = 0; i < values.numel(); ++i) {
    const float v = values.data<float>()[i];
    stored.data<uint16_t>()[i] = dtype == DataType::kFP16 ? float_to_fp16(v) : float_to_bf16(v);
    exact[i] = widen(stored.data<uint16_t>()[i], dtype);
  }
  return unquantized(stored);
}

std::vector<int32_t> random_ints(size_t n, int32_t lo, int32_t hi, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// ---- embedding --------------------------------------------------------------------------------

TEST(CpuEmbedding, CopiesRowsOfEveryTableDtype) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    for (int64_t dim : {1, 7, 130}) {
      for (int64_t tokens : {1, 5, 17}) {
        const int64_t vocab = 67;
        std::vector<double> exact;
        const Weight table = random_weight(dtype, vocab, dim, rng, exact);
        std::vector<int32_t> ids = random_ints(tokens, 0, vocab - 1, rng);
        ids[0] = static_cast<int32_t>(vocab - 1);  // the last row is reachable
        Tensor out = zeros({tokens, dim});
        KUIPER_ASSERT_OK(cpu().embedding[at(dtype)](int_tensor(ids), table, out, ctx()));
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t i = 0; i < dim; ++i) {
            ASSERT_EQ(out.data<float>()[t * dim + i], exact[ids[t] * dim + i])
                << dtype_name(dtype) << " dim " << dim << " t " << t;
          }
        }
      }
    }
  }
}

TEST(CpuEmbedding, RejectsBadIdsShapesAndDtypes) {
  std::mt19937 rng(2);
  for (DataType dtype : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    std::vector<double> exact;
    const Weight table = random_weight(dtype, 10, 4, rng, exact);
    const auto embed = cpu().embedding[at(dtype)];
    Tensor out = zeros({2, 4});
    for (int32_t bad : {-1, 10, 1 << 30}) {
      EXPECT_EQ(embed(int_tensor({3, bad}), table, out, ctx()).code(), StatusCode::kOutOfRange)
          << dtype_name(dtype) << " id " << bad;
    }
    Tensor short_out = zeros({7});
    EXPECT_EQ(embed(int_tensor({1, 2}), table, short_out, ctx()).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(embed(zeros({2}), table, out, ctx()).code(), StatusCode::kInvalidArgument)
        << "fp32 token ids";
  }
  // A table of the wrong dtype for the entry must be refused, not read out of bounds.
  std::vector<double> exact;
  const Weight half_table = random_weight(DataType::kFP16, 10, 4, rng, exact);
  const Weight fp32_table = random_weight(DataType::kFP32, 10, 4, rng, exact);
  Tensor out = zeros({1, 4});
  EXPECT_EQ(cpu().embedding[at(DataType::kFP32)](int_tensor({9}), half_table, out, ctx()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().embedding[at(DataType::kFP16)](int_tensor({9}), fp32_table, out, ctx()).code(),
            StatusCode::kInvalidArgument);
}

// ---- matmul -----------------------------------------------------------------------------------

TEST(CpuMatmul, MatchesReferenceForEveryWeightDtype) {
  std::mt19937 rng(3);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {7, 67}, {130, 333}, {67, 130}, {333, 7}};
  for (DataType dtype : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    for (auto [rows, cols] : shapes) {
      for (int64_t tokens : {1, 5, 17}) {
        std::vector<double> w;
        const Weight weight = random_weight(dtype, rows, cols, rng, w);
        const Tensor in = random_tensor({tokens, cols}, rng);
        Tensor out = zeros({tokens, rows});
        KUIPER_ASSERT_OK(cpu().matmul[at(dtype)](in, weight, out, ctx()));
        std::vector<double> ref(tokens * rows, 0.0);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              ref[t * rows + r] += w[r * cols + c] * in.data<float>()[t * cols + c];
            }
          }
        }
        EXPECT_LT(relative_error(out.data<float>(), ref.data(), ref.size()), kAccumulatedTolerance)
            << dtype_name(dtype) << " " << rows << "x" << cols << " T=" << tokens;
      }
    }
  }
}

TEST(CpuMatmul, RejectsBadShapesAndDtypes) {
  std::mt19937 rng(4);
  for (DataType dtype : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    std::vector<double> w;
    const Weight weight = random_weight(dtype, 6, 10, rng, w);
    const auto matmul = cpu().matmul[at(dtype)];
    Tensor out = zeros({2, 6});
    EXPECT_EQ(matmul(random_tensor({2, 9}, rng), weight, out, ctx()).code(),
              StatusCode::kInvalidArgument) << "input not a multiple of cols";
    Tensor wrong_out = zeros({2, 5});
    EXPECT_EQ(matmul(random_tensor({2, 10}, rng), weight, wrong_out, ctx()).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(matmul(zeros({2, 10}, DataType::kFP16), weight, out, ctx()).code(),
              StatusCode::kInvalidArgument) << "half activations";
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor flat, weight.values.reshape({60}));
    EXPECT_EQ(matmul(random_tensor({2, 10}, rng), unquantized(flat), out, ctx()).code(),
              StatusCode::kInvalidArgument) << "1-d weight";
  }
  std::vector<double> w;
  const Weight bf16 = random_weight(DataType::kBF16, 6, 10, rng, w);
  const Weight fp32 = random_weight(DataType::kFP32, 6, 10, rng, w);
  Tensor out = zeros({1, 6});
  const Tensor in = random_tensor({1, 10}, rng);
  EXPECT_EQ(cpu().matmul[at(DataType::kFP32)](in, bf16, out, ctx()).code(),
            StatusCode::kInvalidArgument) << "bf16 weight in the fp32 entry";
  EXPECT_EQ(cpu().matmul[at(DataType::kBF16)](in, fp32, out, ctx()).code(),
            StatusCode::kInvalidArgument) << "fp32 weight in the bf16 entry";
}

// ---- rmsnorm ----------------------------------------------------------------------------------

std::vector<double> rmsnorm_reference(const Tensor& in, const Tensor& weight, double eps) {
  const int64_t dim = weight.numel();
  std::vector<double> ref(in.numel());
  for (int64_t row = 0; row < in.numel() / dim; ++row) {
    const float* x = in.data<float>() + row * dim;
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
    const double scale = 1.0 / std::sqrt(sum_sq / dim + eps);
    for (int64_t i = 0; i < dim; ++i) ref[row * dim + i] = x[i] * scale * weight.data<float>()[i];
  }
  return ref;
}

TEST(CpuRmsNorm, MatchesReferenceAndWorksInPlace) {
  std::mt19937 rng(5);
  for (int64_t dim : {1, 7, 67, 333}) {
    for (int64_t tokens : {1, 5, 17}) {
      const float eps = 1e-5f;
      const Tensor in = random_tensor({tokens, dim}, rng, -3, 3);
      const Tensor weight = random_tensor({dim}, rng, 0.5, 1.5);
      const std::vector<double> ref = rmsnorm_reference(in, weight, eps);
      Tensor out = zeros({tokens, dim});
      KUIPER_ASSERT_OK(cpu().rmsnorm(in, weight, eps, out, ctx()));
      EXPECT_LT(relative_error(out.data<float>(), ref.data(), ref.size()), kAccumulatedTolerance)
          << dim << " T=" << tokens;
      Tensor in_place = in;  // shares memory: out aliases in
      KUIPER_ASSERT_OK(cpu().rmsnorm(in_place, weight, eps, in_place, ctx()));
      EXPECT_LT(relative_error(in.data<float>(), ref.data(), ref.size()), kAccumulatedTolerance)
          << "in place, " << dim << " T=" << tokens;
    }
  }
}

TEST(CpuRmsNorm, ResidualAddFusedIntoNorm) {
  std::mt19937 rng(15);
  for (int64_t dim : {1, 7, 67, 333}) {
    for (int64_t tokens : {1, 5}) {
      const float eps = 1e-5f;
      Tensor x = random_tensor({tokens, dim}, rng, -3, 3);
      const Tensor delta = random_tensor({tokens, dim}, rng, -1, 1);
      const Tensor weight = random_tensor({dim}, rng, 0.5, 1.5);
      Tensor sum = zeros({tokens, dim});  // x + delta in double, rounded once
      for (int64_t i = 0; i < x.numel(); ++i) {
        sum.data<float>()[i] = static_cast<float>(double{x.data<float>()[i]} + delta.data<float>()[i]);
      }
      const std::vector<double> ref = rmsnorm_reference(sum, weight, eps);
      Tensor out = zeros({tokens, dim});
      KUIPER_ASSERT_OK(cpu().add_rmsnorm(x, delta, weight, eps, out, ctx()));
      EXPECT_EQ(relative_error(x.data<float>(), sum.data<float>(), sum.numel()), 0) << "x holds the sum";
      EXPECT_LT(relative_error(out.data<float>(), ref.data(), ref.size()), kAccumulatedTolerance) << dim;
      Tensor x2 = random_tensor({tokens, dim}, rng), d2 = random_tensor({tokens, dim}, rng);
      Tensor x2_copy = zeros({tokens, dim});
      KUIPER_ASSERT_OK(x2_copy.copy_from(x2));
      Tensor expected = zeros({tokens, dim});
      KUIPER_ASSERT_OK(cpu().add_rmsnorm(x2_copy, d2, weight, eps, expected, ctx()));
      KUIPER_ASSERT_OK(cpu().add_rmsnorm(x2, d2, weight, eps, d2, ctx()));  // out aliases delta
      EXPECT_EQ(relative_error(d2.data<float>(), expected.data<float>(), expected.numel()), 0);
    }
  }
  Tensor x = random_tensor({2, 8}, rng), out = zeros({2, 8});
  EXPECT_EQ(cpu().add_rmsnorm(x, random_tensor({2, 7}, rng), random_tensor({8}, rng), 1e-5f, out, ctx()).code(),
            StatusCode::kInvalidArgument);
}

TEST(CpuRmsNorm, RejectsBadShapesAndDtypes) {
  std::mt19937 rng(6);
  const Tensor in = random_tensor({3, 8}, rng);
  Tensor out = zeros({3, 8});
  Tensor short_out = zeros({3, 7});
  EXPECT_EQ(cpu().rmsnorm(in, random_tensor({7}, rng), 1e-5f, out, ctx()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().rmsnorm(in, random_tensor({8}, rng), 1e-5f, short_out, ctx()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().rmsnorm(in, zeros({8}, DataType::kBF16), 1e-5f, out, ctx()).code(),
            StatusCode::kInvalidArgument);
}

// ---- rope -------------------------------------------------------------------------------------

struct RopeTables {
  Tensor cos, sin;
};

RopeTables rope_tables(int64_t max_positions, int head_dim) {
  RopeTables tables{zeros({max_positions, head_dim / 2}), zeros({max_positions, head_dim / 2})};
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int i = 0; i < head_dim / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / head_dim);
      tables.cos.data<float>()[p * head_dim / 2 + i] = static_cast<float>(std::cos(angle));
      tables.sin.data<float>()[p * head_dim / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return tables;
}

// Rotates interleaved pairs (x[2i], x[2i+1]) of each head by the tables' angle for its row.
std::vector<double> rope_reference(const Tensor& x, const std::vector<int32_t>& positions,
                                   const RopeTables& tables, int head_dim) {
  std::vector<double> ref = as_double(x);
  const int64_t width = x.dim(-1);
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t h = 0; h < width; h += head_dim) {
      for (int i = 0; i < head_dim / 2; ++i) {
        const double c = tables.cos.data<float>()[positions[t] * head_dim / 2 + i];
        const double s = tables.sin.data<float>()[positions[t] * head_dim / 2 + i];
        double* pair = &ref[t * width + h + 2 * i];
        const double a = pair[0], b = pair[1];
        pair[0] = a * c - b * s;
        pair[1] = a * s + b * c;
      }
    }
  }
  return ref;
}

TEST(CpuRope, RotatesInterleavedPairsAtArbitraryPositions) {
  std::mt19937 rng(7);
  const int64_t max_positions = 300;
  for (int head_dim : {2, 8, 34}) {
    const RopeTables tables = rope_tables(max_positions, head_dim);
    for (auto [n_heads, n_kv] : {std::pair{1, 1}, {4, 2}, {8, 1}, {6, 6}}) {
      for (int64_t tokens : {1, 5, 17}) {
        // A prefill chunk that does not start at 0, then shuffled positions.
        std::vector<int32_t> positions(tokens);
        for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(137 + t);
        if (tokens > 1) positions = random_ints(tokens, 0, max_positions - 1, rng);
        Tensor q = random_tensor({tokens, int64_t{n_heads} * head_dim}, rng);
        Tensor k = random_tensor({tokens, int64_t{n_kv} * head_dim}, rng);
        const auto q_ref = rope_reference(q, positions, tables, head_dim);
        const auto k_ref = rope_reference(k, positions, tables, head_dim);
        KUIPER_ASSERT_OK(
            cpu().rope(q, k, int_tensor(positions), tables.cos, tables.sin, head_dim, ctx()));
        EXPECT_LT(relative_error(q.data<float>(), q_ref.data(), q_ref.size()),
                  kElementwiseTolerance) << "q head_dim " << head_dim << " T=" << tokens;
        EXPECT_LT(relative_error(k.data<float>(), k_ref.data(), k_ref.size()),
                  kElementwiseTolerance) << "k head_dim " << head_dim << " T=" << tokens;
      }
    }
  }
}

TEST(CpuRope, PositionZeroIsIdentity) {
  std::mt19937 rng(8);
  const RopeTables tables = rope_tables(4, 16);
  Tensor q = random_tensor({1, 32}, rng), k = random_tensor({1, 16}, rng);
  const auto q_before = as_double(q);
  KUIPER_ASSERT_OK(cpu().rope(q, k, int_tensor({0}), tables.cos, tables.sin, 16, ctx()));
  EXPECT_EQ(relative_error(q.data<float>(), q_before.data(), q_before.size()), 0.0);
}

TEST(CpuRope, RejectsBadPositionsAndShapes) {
  std::mt19937 rng(9);
  const RopeTables tables = rope_tables(10, 8);
  Tensor q = random_tensor({2, 16}, rng), k = random_tensor({2, 8}, rng);
  EXPECT_EQ(cpu().rope(q, k, int_tensor({0, 10}), tables.cos, tables.sin, 8, ctx()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(cpu().rope(q, k, int_tensor({-1, 3}), tables.cos, tables.sin, 8, ctx()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(cpu().rope(q, k, int_tensor({1, 2, 3}), tables.cos, tables.sin, 8, ctx()).code(),
            StatusCode::kInvalidArgument) << "more positions than rows";
  EXPECT_EQ(cpu().rope(q, k, int_tensor({1, 2}), tables.cos, tables.sin, 7, ctx()).code(),
            StatusCode::kInvalidArgument) << "odd head_dim";
  EXPECT_EQ(cpu().rope(q, k, int_tensor({1, 2}), tables.cos, tables.sin, 16, ctx()).code(),
            StatusCode::kInvalidArgument) << "tables for another head_dim";
  EXPECT_EQ(cpu().rope(q, k, zeros({2}), tables.cos, tables.sin, 8, ctx()).code(),
            StatusCode::kInvalidArgument) << "fp32 positions";
}

// ---- kv_store ---------------------------------------------------------------------------------

TEST(CpuKvStore, WritesExactlyTheGivenRows) {
  std::mt19937 rng(10);
  const int64_t context = 37, kv_dim = 34;
  const std::vector<int32_t> positions = {3, 9, 10, 11, 36};
  const int64_t tokens = static_cast<int64_t>(positions.size());
  const Tensor k = random_tensor({tokens, kv_dim}, rng), v = random_tensor({tokens, kv_dim}, rng);
  Tensor k_cache = random_tensor({context, kv_dim}, rng);
  Tensor v_cache = random_tensor({context, kv_dim}, rng);
  const auto k_expected_init = as_double(k_cache), v_expected_init = as_double(v_cache);
  std::vector<double> k_expected = k_expected_init, v_expected = v_expected_init;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < kv_dim; ++i) {
      k_expected[positions[t] * kv_dim + i] = k.data<float>()[t * kv_dim + i];
      v_expected[positions[t] * kv_dim + i] = v.data<float>()[t * kv_dim + i];
    }
  }
  KUIPER_ASSERT_OK(cpu().kv_store[at(DataType::kFP32)](k, v, int_tensor(positions), k_cache,
                                                        v_cache, ctx()));
  for (int64_t i = 0; i < context * kv_dim; ++i) {
    ASSERT_EQ(k_cache.data<float>()[i], k_expected[i]) << "key element " << i;
    ASSERT_EQ(v_cache.data<float>()[i], v_expected[i]) << "value element " << i;
  }
}

TEST(CpuKvStore, RejectsBadPositionsShapesAndDtypes) {
  std::mt19937 rng(11);
  const auto store = cpu().kv_store[at(DataType::kFP32)];
  const Tensor k = random_tensor({2, 8}, rng), v = random_tensor({2, 8}, rng);
  Tensor k_cache = zeros({4, 8}), v_cache = zeros({4, 8});
  EXPECT_EQ(store(k, v, int_tensor({1, 4}), k_cache, v_cache, ctx()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(store(k, v, int_tensor({-1, 0}), k_cache, v_cache, ctx()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(store(k, v, int_tensor({1}), k_cache, v_cache, ctx()).code(),
            StatusCode::kInvalidArgument);
  Tensor narrow_cache = zeros({4, 7});
  EXPECT_EQ(store(k, v, int_tensor({0, 1}), narrow_cache, v_cache, ctx()).code(),
            StatusCode::kInvalidArgument);
  Tensor half_cache = zeros({4, 8}, DataType::kFP16);
  EXPECT_EQ(store(k, v, int_tensor({0, 1}), half_cache, half_cache, ctx()).code(),
            StatusCode::kInvalidArgument);
}

// ---- attention --------------------------------------------------------------------------------

// softmax(q·Kᵀ/√d) V per query head over cache rows 0..positions[t], in double.
std::vector<double> attention_reference(const Tensor& q, const Tensor& k_cache,
                                        const Tensor& v_cache,
                                        const std::vector<int32_t>& positions,
                                        const AttentionShape& s) {
  const int64_t q_dim = int64_t{s.n_heads} * s.head_dim, kv_dim = int64_t{s.n_kv_heads} * s.head_dim;
  const int group = s.n_heads / s.n_kv_heads;
  std::vector<double> out(positions.size() * q_dim, 0.0);
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int h = 0; h < s.n_heads; ++h) {
      const float* qh = q.data<float>() + t * q_dim + h * s.head_dim;
      const int64_t kv_offset = int64_t{h / group} * s.head_dim;
      std::vector<double> scores(positions[t] + 1);
      double max_score = -INFINITY;
      for (int32_t j = 0; j <= positions[t]; ++j) {
        const float* kj = k_cache.data<float>() + j * kv_dim + kv_offset;
        double dot = 0;
        for (int i = 0; i < s.head_dim; ++i) dot += static_cast<double>(qh[i]) * kj[i];
        scores[j] = dot / std::sqrt(static_cast<double>(s.head_dim));
        max_score = std::max(max_score, scores[j]);
      }
      double sum = 0;
      for (double& x : scores) sum += x = std::exp(x - max_score);
      double* o = &out[t * q_dim + h * s.head_dim];
      for (int32_t j = 0; j <= positions[t]; ++j) {
        const float* vj = v_cache.data<float>() + j * kv_dim + kv_offset;
        for (int i = 0; i < s.head_dim; ++i) o[i] += scores[j] / sum * vj[i];
      }
    }
  }
  return out;
}

// A cache whose rows past the last position are NaN: reading any of them poisons the output.
Tensor cache_with_nan_tail(int64_t context, int64_t kv_dim, int32_t last_position,
                           std::mt19937& rng) {
  Tensor cache = random_tensor({context, kv_dim}, rng, -2, 2);
  for (int64_t i = (last_position + 1) * kv_dim; i < context * kv_dim; ++i) {
    cache.data<float>()[i] = kNaN;
  }
  return cache;
}

void check_attention(const AttentionShape& s, const std::vector<int32_t>& positions,
                     int64_t context, std::mt19937& rng) {
  const int64_t tokens = static_cast<int64_t>(positions.size());
  const int64_t kv_dim = int64_t{s.n_kv_heads} * s.head_dim;
  const int32_t last = *std::max_element(positions.begin(), positions.end());
  const Tensor k_cache = cache_with_nan_tail(context, kv_dim, last, rng);
  const Tensor v_cache = cache_with_nan_tail(context, kv_dim, last, rng);
  const Tensor q = random_tensor({tokens, int64_t{s.n_heads} * s.head_dim}, rng, -2, 2);
  Tensor out = zeros(q.shape());
  KUIPER_ASSERT_OK(cpu().attention[at(DataType::kFP32)](q, k_cache, v_cache,
                                                         int_tensor(positions), s, out, ctx()));
  const auto ref = attention_reference(q, k_cache, v_cache, positions, s);
  EXPECT_LT(relative_error(out.data<float>(), ref.data(), ref.size()), kAccumulatedTolerance)
      << s.n_heads << "/" << s.n_kv_heads << " heads x " << s.head_dim << ", T=" << tokens
      << ", first position " << positions[0];
}

TEST(CpuAttention, CausalGroupedQueryAttentionMatchesReference) {
  std::mt19937 rng(12);
  for (int group : {1, 2, 4, 8}) {
    for (int n_kv : {1, 2}) {
      for (int head_dim : {8, 16, 34}) {
        for (int64_t tokens : {1, 5, 17}) {
          for (int32_t start : {0, 3, 50}) {
            // A prefill chunk: row t is at start + t and must not see rows after it, which
            // hold real (non-NaN) values for the later rows of the same chunk.
            std::vector<int32_t> positions(tokens);
            for (int64_t t = 0; t < tokens; ++t) positions[t] = start + static_cast<int32_t>(t);
            check_attention({group * n_kv, n_kv, head_dim}, positions, start + tokens + 7, rng);
          }
        }
      }
    }
  }
}

TEST(CpuAttention, DecodeStepIgnoresRowsBeyondItsPosition) {
  std::mt19937 rng(13);
  check_attention({8, 2, 16}, {0}, 64, rng);
  check_attention({8, 2, 16}, {40}, 64, rng);
  check_attention({4, 4, 34}, {63}, 64, rng);  // the very last row of the cache
}

TEST(CpuAttention, NoPositionsIsANoOp) {
  const AttentionShape s{2, 1, 8};
  Tensor out = zeros({0, 16});
  KUIPER_ASSERT_OK(cpu().attention[at(DataType::kFP32)](zeros({0, 16}), zeros({4, 8}),
                                                         zeros({4, 8}), int_tensor({}), s, out,
                                                         ctx()));
}

// Two sequences (lengths 10 and 7) scattered over a pool of 8 blocks of 4 slots in shuffled
// order: each row's output equals the contiguous kernel's over its own sequence alone, bit for
// bit, and a table naming a block outside the pool is refused.
TEST(CpuAttention, PagedEqualsContiguousPerSequence) {
  std::mt19937 rng(15);
  const AttentionShape shape{4, 2, 8};
  const int block = 4;
  const std::vector<std::vector<int32_t>> blocks = {{5, 2, 7}, {0, 6}};
  const std::vector<int64_t> lengths = {10, 7};
  const std::vector<Tensor> caches = {random_tensor({10, 16}, rng), random_tensor({7, 16}, rng)};
  Tensor pool = random_tensor({8 * block, 16}, rng, 1e3f, 2e3f);  // unwritten slots: huge values
  for (int s = 0; s < 2; ++s) {
    for (int64_t p = 0; p < lengths[s]; ++p) {
      const int64_t slot = int64_t{blocks[s][p / block]} * block + p % block;
      std::memcpy(pool.data<float>() + slot * 16, caches[s].data<float>() + p * 16, 16 * sizeof(float));
    }
  }
  const std::vector<int32_t> row_sequence = {0, 1, 0, 1}, positions = {3, 6, 9, 0};
  const Tensor q = random_tensor({4, 32}, rng);
  Tensor tables = int_tensor({5, 2, 7, 0, 6, 0});
  tables = tables.reshape({2, 3}).value();
  const Tensor rows = int_tensor(row_sequence);
  const op::PagedKv paged{&tables, &rows, block};
  Tensor out = zeros({4, 32});
  KUIPER_ASSERT_OK(cpu().paged_attention[at(DataType::kFP32)](q, pool, pool, int_tensor(positions), paged, shape,
                                                               out, ctx()));
  for (int r = 0; r < 4; ++r) {
    Tensor alone = zeros({1, 32});
    const Tensor& cache = caches[row_sequence[r]];
    KUIPER_ASSERT_OK(cpu().attention[at(DataType::kFP32)](q.slice(r, r + 1).value(), cache, cache,
                                                           int_tensor({positions[r]}), shape, alone, ctx()));
    EXPECT_EQ(std::memcmp(alone.data<float>(), out.data<float>() + r * 32, 32 * sizeof(float)), 0) << "row " << r;
  }
  Tensor bad_tables = int_tensor({5, 2, 7, 0, 8, 0});
  bad_tables = bad_tables.reshape({2, 3}).value();
  const op::PagedKv bad{&bad_tables, &rows, block};
  EXPECT_EQ(cpu().paged_attention[at(DataType::kFP32)](q, pool, pool, int_tensor(positions), bad, shape, out, ctx())
                .code(),
            StatusCode::kOutOfRange);
}

TEST(CpuAttention, RejectsBadShapesAndPositions) {
  std::mt19937 rng(14);
  const auto attend = cpu().attention[at(DataType::kFP32)];
  const Tensor q = random_tensor({2, 32}, rng);
  const Tensor cache = random_tensor({6, 16}, rng);
  Tensor out = zeros({2, 32});
  const AttentionShape good{4, 2, 8};
  KUIPER_ASSERT_OK(attend(q, cache, cache, int_tensor({0, 1}), good, out, ctx()));
  EXPECT_EQ(attend(q, cache, cache, int_tensor({0, 6}), good, out, ctx()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(attend(q, cache, cache, int_tensor({0, -1}), good, out, ctx()).code(),
            StatusCode::kOutOfRange);
  for (AttentionShape bad : {AttentionShape{4, 3, 8}, AttentionShape{0, 2, 8},
                             AttentionShape{4, 2, 0}, AttentionShape{8, 2, 4}}) {
    EXPECT_EQ(attend(q, cache, cache, int_tensor({0, 1}), bad, out, ctx()).code(),
              StatusCode::kInvalidArgument) << bad.n_heads << "/" << bad.n_kv_heads << "x"
                                            << bad.head_dim;
  }
  EXPECT_EQ(attend(q, cache, cache, int_tensor({0}), good, out, ctx()).code(),
            StatusCode::kInvalidArgument) << "fewer positions than query rows";
  Tensor half_cache = zeros({6, 16}, DataType::kFP16);
  EXPECT_EQ(attend(q, half_cache, half_cache, int_tensor({0, 1}), good, out, ctx()).code(),
            StatusCode::kInvalidArgument);
}

// ---- swiglu, add, argmax ----------------------------------------------------------------------

TEST(CpuElementwise, SwigluMatchesReferenceAndWorksInPlace) {
  std::mt19937 rng(15);
  for (int64_t n : {1, 7, 333, 70001}) {  // the last one crosses the threading threshold
    const Tensor gate = random_tensor({n}, rng, -6, 6), up = random_tensor({n}, rng, -2, 2);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate.data<float>()[i];
      ref[i] = g / (1 + std::exp(-g)) * up.data<float>()[i];
    }
    Tensor out = zeros({n});
    KUIPER_ASSERT_OK(cpu().swiglu(gate, up, out, ctx()));
    EXPECT_LT(relative_error(out.data<float>(), ref.data(), n), kElementwiseTolerance) << n;
    Tensor in_place = gate;
    KUIPER_ASSERT_OK(cpu().swiglu(in_place, up, in_place, ctx()));
    EXPECT_LT(relative_error(gate.data<float>(), ref.data(), n), kElementwiseTolerance) << n;
  }
}

TEST(CpuElementwise, AddMatchesReferenceAndWorksInPlace) {
  std::mt19937 rng(16);
  for (int64_t n : {1, 7, 333, 70001}) {
    const Tensor a = random_tensor({n}, rng), b = random_tensor({n}, rng);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = double{a.data<float>()[i]} + b.data<float>()[i];
    Tensor out = zeros({n});
    KUIPER_ASSERT_OK(cpu().add(a, b, out, ctx()));
    EXPECT_LT(relative_error(out.data<float>(), ref.data(), n), kElementwiseTolerance) << n;
    Tensor in_place = a;
    KUIPER_ASSERT_OK(cpu().add(in_place, b, in_place, ctx()));
    EXPECT_LT(relative_error(a.data<float>(), ref.data(), n), kElementwiseTolerance) << n;
  }
}

TEST(CpuElementwise, RejectsSizeAndDtypeMismatches) {
  std::mt19937 rng(17);
  const Tensor a = random_tensor({8}, rng), b = random_tensor({7}, rng);
  Tensor out = zeros({8});
  Tensor half_out = zeros({8}, DataType::kFP16);
  EXPECT_EQ(cpu().swiglu(a, b, out, ctx()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().add(a, b, out, ctx()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().swiglu(a, a, half_out, ctx()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().add(a, a, half_out, ctx()).code(), StatusCode::kInvalidArgument);
}

TEST(CpuArgmax, FindsTheLargestFirstOnTies) {
  std::mt19937 rng(18);
  for (int64_t n : {1, 7, 333, 128256}) {
    Tensor logits = random_tensor({n}, rng, -10, 10);
    float* x = logits.data<float>();
    if (n > 3) {  // plant a tie for the maximum; the earlier index must win
      x[n / 3] = 11.f;
      x[n - 1] = 11.f;
    }
    int64_t expected = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] > x[expected]) expected = i;
    }
    Tensor out = zeros({1}, DataType::kINT32);
    KUIPER_ASSERT_OK(cpu().argmax(logits, out, ctx()));
    EXPECT_EQ(out.data<int32_t>()[0], expected) << n;
  }
}

TEST(CpuArgmax, EachRowOnItsOwnAndMinusOneForARowWithNaNOrInf) {
  std::mt19937 rng(20);
  for (int64_t n : {5, 16, 33, 32000}) {
    const int64_t rows = 4;
    Tensor logits = random_tensor({rows, n}, rng, -10, 10);
    float* x = logits.data<float>();
    x[1 * n + n / 2] = 20.f;  // row 1: a clear winner in the middle
    x[2 * n + n - 1] = std::nanf("");
    x[3 * n] = INFINITY;
    Tensor out = zeros({rows}, DataType::kINT32);
    KUIPER_ASSERT_OK(cpu().argmax(logits, out, ctx()));
    int64_t row0 = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] > x[row0]) row0 = i;
    }
    EXPECT_EQ(out.data<int32_t>()[0], row0) << n;
    EXPECT_EQ(out.data<int32_t>()[1], n / 2) << n;
    EXPECT_EQ(out.data<int32_t>()[2], -1) << n;
    EXPECT_EQ(out.data<int32_t>()[3], -1) << n;
  }
}

TEST(CpuArgmax, RejectsBadArguments) {
  std::mt19937 rng(19);
  const Tensor logits = random_tensor({5}, rng);
  Tensor fp32_out = zeros({1});
  Tensor no_room = zeros({0}, DataType::kINT32);
  Tensor out = zeros({1}, DataType::kINT32);
  EXPECT_EQ(cpu().argmax(logits, fp32_out, ctx()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().argmax(logits, no_room, ctx()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu().argmax(zeros({0}), out, ctx()).code(), StatusCode::kInvalidArgument)
      << "no logits to choose from";
  EXPECT_EQ(cpu().argmax(zeros({5}, DataType::kINT32), out, ctx()).code(),
            StatusCode::kInvalidArgument);
}

// ---- the table itself -------------------------------------------------------------------------

TEST(CpuKernelTable, MissingEntriesAreReportedNotCalled) {
  const auto missing = op::pick_kernel(cpu().kv_store[at(DataType::kINT32)], "kv_store",
                                       DeviceType::kCPU, DataType::kINT32);
  EXPECT_EQ(missing.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(missing.status().message().find("kv_store"), std::string::npos);
  EXPECT_TRUE(op::pick_kernel(cpu().rmsnorm, "rmsnorm", DeviceType::kCPU).ok());
#ifndef KUIPER_WITH_CUDA
  // A build without CUDA has an empty CUDA table (a CUDA build fills it, GPU or not).
  EXPECT_EQ(op::kernel_table(DeviceType::kCUDA).rmsnorm, nullptr);
#endif
}

}  // namespace
}  // namespace kuiper
