// Exporting: every output of the export path (kuiper format in each dtype, llama2.c v2) reads
// back as identical tensors and config; kuiper files map zero-copy and damaged ones are refused;
// and on the bundled stories260K model the int8 file is small and predicts text about as well
// as fp32 (perplexity computed here, independently of llama_perplexity).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/checkpoint/formats/kuiper_format.h"
#include "kuiper/checkpoint/formats/llama2c_v2_writer.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "kuiper/checkpoint/formats/safetensors.h"
#include "kuiper/tokenizer/tokenizer.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::expect_load_refused;

LlamaConfig unusual_config(bool shared) {
  LlamaConfig c = test::model_shape(64, 160, 2, 4, 1, 96, 48);
  c.shared_classifier = shared;
  c.rope_theta = 500000.f;  // fields llama2.c files cannot hold must survive a kuiper file
  c.rope_scaling = {true, 8.f, 1.f, 4.f, 8192};
  c.norm_eps = 1e-6f;
  c.bos_id = 5;
  c.eos_ids = {6, 7};
  return c;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void expect_identical(Checkpoint& a, Checkpoint& b) {
  const LlamaConfig &ca = a.config, &cb = b.config;
  EXPECT_EQ(ca.summary(), cb.summary());
  EXPECT_EQ(ca.shared_classifier, cb.shared_classifier);
  EXPECT_EQ(ca.rope_theta, cb.rope_theta);
  EXPECT_EQ(ca.rope_scaling.enabled, cb.rope_scaling.enabled);
  EXPECT_EQ(ca.rope_scaling.factor, cb.rope_scaling.factor);
  EXPECT_EQ(ca.rope_scaling.original_max_positions, cb.rope_scaling.original_max_positions);
  EXPECT_EQ(ca.norm_eps, cb.norm_eps);
  EXPECT_EQ(ca.bos_id, cb.bos_id);
  EXPECT_EQ(ca.eos_ids, cb.eos_ids);
  auto ma = named_matrices(a.weights, ca.shared_classifier);
  auto mb = named_matrices(b.weights, cb.shared_classifier);
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    SCOPED_TRACE(ma[i].name);
    EXPECT_TRUE(same_bytes(ma[i].weight->values, mb[i].weight->values));
    EXPECT_EQ(ma[i].weight->group_size, mb[i].weight->group_size);
    if (ma[i].weight->is_quantized()) {
      EXPECT_TRUE(same_bytes(ma[i].weight->scales, mb[i].weight->scales));
    }
    EXPECT_EQ(ma[i].weight->mins.is_empty(), mb[i].weight->mins.is_empty());
    if (!ma[i].weight->mins.is_empty()) {
      EXPECT_TRUE(same_bytes(ma[i].weight->mins, mb[i].weight->mins));
    }
  }
  auto na = named_norms(a.weights, a.config), nb = named_norms(b.weights, b.config);
  for (size_t i = 0; i < na.size(); ++i) EXPECT_TRUE(same_bytes(*na[i].tensor, *nb[i].tensor)) << na[i].name;
}

struct ExportCase {
  WeightFormat format;
  bool shared;
};

class KuiperFormatRoundTrip : public testing::TestWithParam<ExportCase> {};

TEST_P(KuiperFormatRoundTrip, ReadsBackIdenticalAndZeroCopy) {
  const ExportCase p = GetParam();
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint fp32, make_random_checkpoint(unusual_config(p.shared), 17));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint converted, convert_checkpoint(fp32, p.format));
  const std::string path = test::scratch_dir("kuiper_roundtrip") + "/model.kuiper";
  KUIPER_ASSERT_OK(save_kuiper(converted, path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint back, load_checkpoint(path));
  EXPECT_NE(back.format.find("kuiper"), std::string::npos) << back.format;
  expect_identical(converted, back);
  // Tensors are views of the mapped file, not copies.
  EXPECT_FALSE(back.weights.layers[1].w2.values.buffer()->owns_memory());
  EXPECT_FALSE(back.weights.final_norm.buffer()->owns_memory());
}

INSTANTIATE_TEST_SUITE_P(
    EveryStorage, KuiperFormatRoundTrip,
    testing::Values(ExportCase{{DataType::kFP32, 0}, true}, ExportCase{{DataType::kFP16, 0}, false},
                    ExportCase{{DataType::kBF16, 0}, true}, ExportCase{{DataType::kINT8, 64}, true},
                    ExportCase{{DataType::kINT8, 32}, false}, ExportCase{{DataType::kINT8, 16}, true},
                    ExportCase{{DataType::kINT4, 32, Int4Scheme::kSymmetric}, true}, ExportCase{{DataType::kINT4, 64, Int4Scheme::kWithMin}, false},
                    ExportCase{{DataType::kINT4, 128, Int4Scheme::kSymmetric}, false}, ExportCase{{DataType::kINT4, 32, Int4Scheme::kWithMin}, true}));

TEST(Llama2cV2RoundTrip, ReadsBackIdentical) {
  LlamaConfig c = unusual_config(false);
  c.rope_theta = 10000.f;  // all llama2.c files can say
  c.rope_scaling.enabled = false;
  c.norm_eps = 1e-5f;
  c.bos_id = 1;
  c.eos_ids = {2};
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint fp32, make_random_checkpoint(c, 5));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint q, convert_checkpoint(fp32, {DataType::kINT8, 32}));
  const std::string path = test::scratch_dir("v2_roundtrip") + "/model.bin";
  KUIPER_ASSERT_OK(save_llama2c_v2(q, path));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint back, load_checkpoint(path));
  expect_identical(q, back);
  // llama2.c files cannot hold the rope settings of unusual_config: refused, not dropped.
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint scaled, convert_checkpoint(
      make_random_checkpoint(unusual_config(false), 5).value(), {DataType::kINT8, 32}));
  EXPECT_EQ(save_llama2c_v2(scaled, path).code(), StatusCode::kUnsupported);
}

TEST(KuiperFormat, StoresMixedStorageAsVersion3) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint fp32, make_random_checkpoint(unusual_config(true), 1));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint q, convert_checkpoint(fp32, {DataType::kINT8, 32}));
  q.weights.layers[1].w3 = fp32.weights.layers[1].w3;
  const std::string path = test::scratch_dir("kuiper_mixed") + "/model.kuiper";
  KUIPER_ASSERT_OK(save_kuiper(q, path));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint back, load_checkpoint(path));
  EXPECT_NE(back.format.find("kuiper v3"), std::string::npos) << back.format;
  EXPECT_EQ(back.weights.layers[1].w3.dtype(), DataType::kFP32);
  expect_identical(q, back);
}

// ---- damaged kuiper files ---------------------------------------------------------------------

class DamagedKuiperFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("kuiper_damaged");
    fp32_ = make_random_checkpoint(unusual_config(true), 3).value();
    q_ = convert_checkpoint(fp32_, {DataType::kINT8, 32}).value();
  }
  // A file like save_kuiper's, with `edit` applied to its tensor list and metadata first.
  std::string write_variant(const std::string& name,
                            const std::function<void(std::vector<std::pair<std::string, Tensor>>&,
                                                     std::map<std::string, std::string>&)>& edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const NamedMatrix& m : named_matrices(q_.weights, true)) {
      tensors.emplace_back(m.name + ".weight", m.weight->values);
      tensors.emplace_back(m.name + ".scales", m.weight->scales);
    }
    for (const NamedVector& n : named_norms(q_.weights, q_.config)) tensors.emplace_back(n.name + ".weight", *n.tensor);
    std::map<std::string, std::string> meta = {
        {"format", "kuiper"}, {"format_version", "1"}, {"weights", "int8"},
        {"quantization", "int8-symmetric-grouped"}, {"group_size", "32"}};
    // The config text comes from a real export.
    const std::string good = dir_ + "/good.kuiper";
    EXPECT_TRUE(save_kuiper(q_, good).ok());
    meta["config"] = SafetensorsFile::open(good).value().metadata().at("config");
    edit(tensors, meta);
    const std::string path = dir_ + "/" + name;
    test::write_safetensors(path, meta, tensors);
    return path;
  }

  std::string dir_;
  Checkpoint fp32_, q_;
};

TEST_F(DamagedKuiperFile, UnchangedVariantLoads) {
  const std::string path = write_variant("same.kuiper", [](auto&, auto&) {});
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint back, load_checkpoint(path));
  expect_identical(q_, back);
}

TEST_F(DamagedKuiperFile, RefusesNewerVersionMissingTensorsWrongShapesBadConfig) {
  expect_load_refused(write_variant("v4.kuiper", [](auto&, auto& m) { m["format_version"] = "4"; }), "version 4");
  expect_load_refused(write_variant("missing.kuiper", [](auto& t, auto&) { t.erase(t.begin() + 5); }), "layers.0.wk");
  expect_load_refused(write_variant("shape.kuiper", [this](auto& t, auto&) { t[2].second = q_.weights.layers[0].wk.values; }),
                      "layers.0.wq.weight");
  expect_load_refused(write_variant("scales.kuiper", [](auto&, auto& m) { m["group_size"] = "64"; }), "scales");
  expect_load_refused(write_variant("config.kuiper", [](auto&, auto& m) { m["config"] = "{\"dim\": 64}"; }),
                      "bad kuiper config");
  expect_load_refused(write_variant("extra.kuiper", [this](auto& t, auto&) { t.emplace_back("stray", q_.weights.final_norm); }),
                      "tensors");
}

TEST_F(DamagedKuiperFile, RefusesTruncatedFile) {
  const std::string good = dir_ + "/good.kuiper";
  KUIPER_ASSERT_OK(save_kuiper(q_, good));
  std::filesystem::copy_file(good, dir_ + "/truncated.kuiper");
  std::filesystem::resize_file(dir_ + "/truncated.kuiper", std::filesystem::file_size(good) - 1);
  EXPECT_FALSE(load_checkpoint(dir_ + "/truncated.kuiper").ok());
  EXPECT_FALSE(load_checkpoint(dir_ + "/truncated.kuiper", {"kuiper"}).ok());
}

// ---- quality on the bundled model ---------------------------------------------------------------

TEST(Stories260KInt8, SmallFileAndPerplexityWithinTwoPercent) {
  const std::string model = test::source_path("models/stories260K/stories260K.bin");
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint fp32, load_checkpoint(model));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint q, convert_checkpoint(fp32, {DataType::kINT8, 64}));
  const std::string path = test::scratch_dir("stories_int8") + "/stories260K-int8.kuiper";
  KUIPER_ASSERT_OK(save_kuiper(q, path));
  EXPECT_LE(std::filesystem::file_size(path), 0.3 * std::filesystem::file_size(model));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint loaded, load_checkpoint(path));

  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  const std::vector<int32_t> ids = test::tinystories_slice_tokens(*tokenizer);
  ASSERT_GT(ids.size(), 2000u);
  const double ppl_fp32 = test::perplexity(fp32, ids, tokenizer->bos_id());
  const double ppl_int8 = test::perplexity(loaded, ids, tokenizer->bos_id());
  std::printf("stories260K perplexity on %zu tokens: fp32 %.4f, int8 %.4f\n", ids.size(), ppl_fp32, ppl_int8);
  EXPECT_LT(ppl_fp32, 10.0);  // the model does predict this text
  EXPECT_LT(ppl_int8, ppl_fp32 * 1.02);
}

}  // namespace
}  // namespace kuiper
