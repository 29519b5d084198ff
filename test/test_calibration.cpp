// Calibration for GPTQ: the model's own text (model/calibration_text.h) is reproducible, starts
// at BOS and stops at a story's end; a supplied text is cut into BOS-led sequences; the inputs
// collected through the model (model/calibration_inputs.h) hold one row per token for every
// matrix, shared by the matrices that multiply the same rows; observing inputs is refused where
// the model cannot (tensor parallelism); under a small memory budget they are collected layer by
// layer, to the same sums.
#include <algorithm>

#include "kuiper/checkpoint/load_checkpoint.h"
#include "kuiper/model/calibration_inputs.h"
#include "kuiper/model/calibration_text.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

Checkpoint stories260k() { return load_checkpoint(test::source_path("models/stories260K/stories260K.bin")).value(); }

TEST(CalibrationText, SelfGeneratedIsReproducibleAndEndsStories) {
  const Checkpoint m = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(auto a, self_generated_sequences(m.config, m.weights, 1500, 128, 5));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto b, self_generated_sequences(m.config, m.weights, 1500, 128, 5));
  EXPECT_EQ(a, b);
  int64_t total = 0;
  for (const auto& s : a) {
    ASSERT_FALSE(s.empty());
    EXPECT_EQ(s.front(), m.config.bos_id);
    EXPECT_LE(s.size(), 128u);
    EXPECT_EQ(std::count(s.begin() + 1, s.end(), m.config.bos_id), 0);
    for (int32_t eos : m.config.eos_ids) EXPECT_EQ(std::count(s.begin(), s.end(), eos), 0);
    total += static_cast<int64_t>(s.size());
  }
  EXPECT_EQ(total, 1500);  // the last sequence is cut to the count
  KUIPER_ASSERT_OK_AND_ASSIGN(auto other, self_generated_sequences(m.config, m.weights, 1500, 128, 6));
  EXPECT_NE(a, other);
  EXPECT_FALSE(self_generated_sequences(m.config, m.weights, 10, 1, 5).ok());
}

TEST(CalibrationText, TextIsCutIntoBosLedSequences) {
  const std::vector<int32_t> ids = {10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(text_sequences(ids, 1, 100, 4), (std::vector<std::vector<int32_t>>{{1, 10, 11, 12}, {1, 13, 14, 15}, {1, 16}}));
  EXPECT_EQ(text_sequences(ids, 1, 6, 4), (std::vector<std::vector<int32_t>>{{1, 10, 11, 12}, {1, 13}}));
}

const std::vector<std::vector<int32_t>> kSequences = {{1, 403, 407, 261, 378}, {1, 54, 71}};

TEST(CalibrationInputs, OneRowPerTokenForEveryMatrix) {
  const Checkpoint m = stories260k();
  CalibrationInputs inputs(m.config, m.weights, kSequences);
  EXPECT_EQ(inputs.tokens(), 8);
  for (const char* name : {"layers.0.wq", "layers.4.wo", "layers.2.w1", "layers.3.w2", "classifier"}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(const InputGram* gram, inputs.for_matrix(name));
    ASSERT_NE(gram, nullptr) << name;
    EXPECT_EQ(gram->rows(), 8) << name;
    double trace = 0;
    for (int i = 0; i < gram->dim(); ++i) trace += gram->sums()[i * gram->dim() + i];
    EXPECT_GT(trace, 0) << name;
  }
  EXPECT_EQ(inputs.passes(), 1);  // stories260K's Gram matrices fit the default budget at once
  EXPECT_EQ(inputs.for_matrix("layers.1.wq").value(), inputs.for_matrix("layers.1.wv").value());
  EXPECT_EQ(inputs.for_matrix("layers.1.w1").value(), inputs.for_matrix("layers.1.w3").value());
  EXPECT_NE(inputs.for_matrix("layers.1.wq").value(), inputs.for_matrix("layers.2.wq").value());
  EXPECT_EQ(inputs.for_matrix("layers.3.w2").value()->dim(), m.config.hidden_dim);
  EXPECT_EQ(inputs.for_matrix("token_embedding").value(), nullptr);
  EXPECT_EQ(inputs.for_matrix("layers.5.wq").value(), nullptr);
}

// With room for one layer at a time, each layer takes a pass of its own and gets the same sums.
TEST(CalibrationInputs, SmallBudgetCollectsLayerByLayer) {
  const Checkpoint m = stories260k();
  CalibrationInputs whole(m.config, m.weights, kSequences);
  CalibrationInputs layered(m.config, m.weights, kSequences, /*budget_bytes=*/1);
  for (int l = 0; l < m.config.n_layers; ++l) {
    for (const char* matrix : {"wq", "wo", "w1", "w2"}) {
      const std::string name = "layers." + std::to_string(l) + "." + matrix;
      KUIPER_ASSERT_OK_AND_ASSIGN(const InputGram* expected, whole.for_matrix(name));
      KUIPER_ASSERT_OK_AND_ASSIGN(const InputGram* got, layered.for_matrix(name));
      EXPECT_EQ(got->sums(), expected->sums()) << name;
    }
  }
  EXPECT_EQ(layered.passes(), m.config.n_layers);
  KUIPER_ASSERT_OK_AND_ASSIGN(const InputGram* classifier, layered.for_matrix("classifier"));
  EXPECT_EQ(classifier->sums(), whole.for_matrix("classifier").value()->sums());
  EXPECT_EQ(layered.passes(), m.config.n_layers);  // held with the last layer
  KUIPER_ASSERT_OK(layered.for_matrix("layers.0.wq").status());
  EXPECT_EQ(layered.passes(), m.config.n_layers + 1);  // collected again
}

TEST(CalibrationInputs, ObservingIsRefusedUnderTensorParallelism) {
  const Checkpoint m = stories260k();
  ModelOptions options;
  options.tensor_parallel = 2;
  options.observe_inputs = [](int, MatrixInput, const Tensor&) { return ok_status(); };
  EXPECT_FALSE(LlamaModel::create(m.config, m.weights, options).ok());
}

}  // namespace
}  // namespace kuiper
