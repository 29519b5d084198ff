// int4 checkpoints: an exported kuiper file (format version 2) gives the same logits as
// quantizing at load; kuiper's int4 scheme as kuiper_export writes it (GPTQ on text the model
// writes itself, the token embedding int8: format version 3) round-trips and lowers the
// perplexity; damaged int4 files, int4 storage claimed by a version-1 file and per-matrix storage
// claimed by a version-2 file are refused with one line naming the problem; the bundled model
// keeps its perplexity within the bound below. (Round trips of every storage, int4 included,
// are in test_int8_export.cpp.)
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/checkpoint/formats/kuiper_format.h"
#include "kuiper/checkpoint/formats/safetensors.h"
#include "kuiper/model/calibration_inputs.h"
#include "kuiper/model/calibration_text.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/tokenizer/tokenizer.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::expect_load_refused;

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 54, 71, 260, 300, 9};

Checkpoint stories260k() { return load_checkpoint(test::source_path("models/stories260K/stories260K.bin")).value(); }

// stories260K in kuiper's int4 scheme: GPTQ against `tokens` tokens the model writes itself,
// the token embedding (also the classifier) int8.
Checkpoint gptq_int4(const Checkpoint& fp32, int64_t tokens) {
  CalibrationInputs inputs(fp32.config, fp32.weights,
                           self_generated_sequences(fp32.config, fp32.weights, tokens, 512, 1).value());
  ConvertOptions options;
  options.embedding = WeightFormat{DataType::kINT8, 64};
  options.calibration = &inputs;
  return convert_checkpoint(fp32, {DataType::kINT4, 32, kDefaultInt4Scheme}, nullptr, options).value();
}

TEST(Int4Export, FileGivesTheLogitsOfQuantizingAtLoad) {
  const Checkpoint fp32 = stories260k();
  // The model quantizes fp32 weights at load in the default scheme and groups of 32 (weight_convert.h).
  ModelOptions int4;
  int4.weight_dtype = DataType::kINT4;
  auto at_load = LlamaModel::create(fp32.config, fp32.weights, int4).value();
  const Tensor logits = at_load->forward(kPrompt, 0).value();
  const std::vector<float> expected(logits.data<float>(), logits.data<float>() + logits.numel());

  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint q, convert_checkpoint(fp32, {DataType::kINT4, 32, kDefaultInt4Scheme}));
  const std::string path = test::scratch_dir("int4_export") + "/stories260K-int4.kuiper";
  KUIPER_ASSERT_OK(save_kuiper(q, path));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint loaded, load_checkpoint(path));
  EXPECT_NE(loaded.format.find("kuiper v2"), std::string::npos) << loaded.format;
  EXPECT_EQ(test::last_logits(loaded, kPrompt), expected);
  EXPECT_LE(std::filesystem::file_size(path), 0.2 * std::filesystem::file_size(test::source_path("models/stories260K/stories260K.bin")));
}

TEST(Int4Export, OtherGroupsAndSchemeLoadAsConverted) {
  const Checkpoint fp32 = stories260k();
  for (const WeightFormat& f : {WeightFormat{DataType::kINT4, 64, Int4Scheme::kWithMin},
                                WeightFormat{DataType::kINT4, 128, Int4Scheme::kSymmetric}}) {
    SCOPED_TRACE(weight_format_name(f));
    KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint q, convert_checkpoint(fp32, f));
    const std::string path = test::scratch_dir("int4_export_groups") + "/model.kuiper";
    KUIPER_ASSERT_OK(save_kuiper(q, path));
    KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint loaded, load_checkpoint(path));
    EXPECT_EQ(loaded.weights.layers[0].w2.group_size, f.group_size);
    EXPECT_EQ(loaded.weights.layers[0].w2.mins.is_empty(), f.int4_scheme == Int4Scheme::kSymmetric);
    EXPECT_EQ(test::last_logits(loaded, kPrompt), test::last_logits(q, kPrompt));
  }
}

TEST(Int4Export, GptqFileWithInt8EmbeddingRoundTrips) {
  const Checkpoint q = gptq_int4(stories260k(), 2048);
  EXPECT_EQ(q.weights.token_embedding.dtype(), DataType::kINT8);
  EXPECT_EQ(q.weights.layers[3].w2.dtype(), DataType::kINT4);
  const std::string path = test::scratch_dir("int4_export_gptq") + "/stories260K-gptq.kuiper";
  KUIPER_ASSERT_OK(save_kuiper(q, path));
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint loaded, load_checkpoint(path));
  EXPECT_NE(loaded.format.find("kuiper v3"), std::string::npos) << loaded.format;
  EXPECT_EQ(loaded.weights.token_embedding.dtype(), DataType::kINT8);
  EXPECT_EQ(loaded.weights.token_embedding.group_size, 64);
  EXPECT_EQ(loaded.weights.layers[3].w2.group_size, 32);
  EXPECT_EQ(test::last_logits(loaded, kPrompt), test::last_logits(q, kPrompt));
}

TEST(Int4Export, RefusesNonFiniteWeightsNamingTheMatrix) {
  Checkpoint fp32 = stories260k();
  Tensor w3 = fp32.weights.layers[2].w3.values.to(cpu_allocator()).value();  // a copy: the file is mapped
  w3.data<float>()[7] = std::nanf("");
  fp32.weights.layers[2].w3.values = w3;
  const auto q = convert_checkpoint(fp32, {DataType::kINT4, 32});
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("layers.2.w3"), std::string::npos) << q.status().to_string();
}

// The default int4 (with minimum, groups of 32) on the bundled model and the test slice of
// TinyStories: 5.8853 against fp32's 5.1995 (+13.2%, measured). The bound leaves about 3 points
// for a different quantizer, not the larger loss of the symmetric scheme.
TEST(Int4Export, Stories260KPerplexityWithinSixteenPercent) {
  const Checkpoint fp32 = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint q, convert_checkpoint(fp32, {DataType::kINT4, 32, kDefaultInt4Scheme}));
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  const std::vector<int32_t> ids = test::tinystories_slice_tokens(*tokenizer);
  ASSERT_GT(ids.size(), 2000u);
  const double ppl_fp32 = test::perplexity(fp32, ids, tokenizer->bos_id());
  const double ppl_int4 = test::perplexity(q, ids, tokenizer->bos_id());
  std::printf("stories260K perplexity on %zu tokens: fp32 %.4f, int4 %.4f (%+.1f%%)\n", ids.size(), ppl_fp32,
              ppl_int4, 100 * (ppl_int4 / ppl_fp32 - 1));
  EXPECT_LT(ppl_int4, ppl_fp32 * 1.16);
}

// GPTQ with the int8 embedding against the searched codes alone, on the test slice (not what it
// was calibrated on: that is text the model wrote). On docs/quantization.md's text: +8.87% → +4.60%.
TEST(Int4Export, GptqLowersStories260KPerplexity) {
  const Checkpoint fp32 = stories260k();
  KUIPER_ASSERT_OK_AND_ASSIGN(Checkpoint plain, convert_checkpoint(fp32, {DataType::kINT4, 32, kDefaultInt4Scheme}));
  const Checkpoint gptq = gptq_int4(fp32, 8192);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto tokenizer, load_tokenizer(test::source_path("models/stories260K/tok512.model")));
  const std::vector<int32_t> ids = test::tinystories_slice_tokens(*tokenizer);
  const double ppl_fp32 = test::perplexity(fp32, ids, tokenizer->bos_id());
  const double ppl_plain = test::perplexity(plain, ids, tokenizer->bos_id());
  const double ppl_gptq = test::perplexity(gptq, ids, tokenizer->bos_id());
  std::printf("stories260K perplexity on %zu tokens: fp32 %.4f, int4 %.4f (%+.1f%%), GPTQ %.4f (%+.1f%%)\n", ids.size(),
              ppl_fp32, ppl_plain, 100 * (ppl_plain / ppl_fp32 - 1), ppl_gptq, 100 * (ppl_gptq / ppl_fp32 - 1));
  // Measured: 0.73 of the searched codes' excess.
  EXPECT_LT(ppl_gptq - ppl_fp32, 0.85 * (ppl_plain - ppl_fp32));
}

// ---- damaged int4 files -------------------------------------------------------------------------

class DamagedInt4File : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("int4_damaged");
    good_ = dir_ + "/good.kuiper";
    const Checkpoint q = convert_checkpoint(stories260k(), {DataType::kINT4, 32, Int4Scheme::kWithMin}).value();
    ASSERT_TRUE(save_kuiper(q, good_).ok());
  }
  using Tensors = std::map<std::string, Tensor>;
  using Metadata = std::map<std::string, std::string>;
  // The good file rewritten with `edit` applied to its tensors and metadata.
  std::string variant(const std::string& name, const std::function<void(Tensors&, Metadata&)>& edit) {
    const SafetensorsFile good = SafetensorsFile::open(good_).value();
    Tensors tensors;
    for (const std::string& n : good.names()) tensors[n] = good.tensor(n).value();
    Metadata meta = good.metadata();
    edit(tensors, meta);
    const std::string path = dir_ + "/" + name;
    test::write_safetensors(path, meta, {tensors.begin(), tensors.end()});
    return path;
  }
  std::string dir_, good_;
};

TEST_F(DamagedInt4File, UnchangedVariantLoads) {
  EXPECT_TRUE(load_checkpoint(variant("same.kuiper", [](Tensors&, Metadata&) {})).ok());
}

TEST_F(DamagedInt4File, RefusesInconsistentContents) {
  expect_load_refused(variant("v1.kuiper", [](Tensors&, Metadata& m) { m["format_version"] = "1"; }), "version 1");
  expect_load_refused(variant("mins.kuiper", [](Tensors& t, Metadata&) { t.erase("layers.0.wq.mins"); }), "layers.0.wq.mins");
  expect_load_refused(variant("extra.kuiper", [](Tensors&, Metadata& m) { m["quantization"] = "int4-symmetric-grouped"; }),
                      "tensors");  // the mins left over
  expect_load_refused(variant("group.kuiper", [](Tensors&, Metadata& m) { m["group_size"] = "64"; }), "scales");
  expect_load_refused(variant("odd.kuiper", [](Tensors&, Metadata& m) { m["group_size"] = "31"; }), "group size 31");
  expect_load_refused(variant("scheme.kuiper", [](Tensors&, Metadata& m) { m["quantization"] = "int4-nf4"; }), "int4-nf4");
  expect_load_refused(variant("unpacked.kuiper",
                              [](Tensors& t, Metadata&) {
                                const Tensor& v = t["layers.0.wq.weight"];
                                t["layers.0.wq.weight"] = Tensor::zeros_cpu(DataType::kINT4, {v.dim(0), v.dim(1) * 2}).value();
                         }),
                 "layers.0.wq.weight");
  expect_load_refused(variant("int8values.kuiper",
                              [](Tensors& t, Metadata&) {
                                const Tensor& v = t["layers.0.wq.weight"];
                                t["layers.0.wq.weight"] = Tensor::zeros_cpu(DataType::kINT8, v.shape()).value();
                         }),
                 "layers.0.wq.weight");
}

TEST_F(DamagedInt4File, RefusesPerMatrixStorageOutsideVersion3) {
  const std::string storage = R"({"token_embedding": {"weights": "int8", "quantization": "int8-symmetric-grouped", "group_size": "64"}})";
  expect_load_refused(variant("v2storage.kuiper", [&](Tensors&, Metadata& m) { m["matrix_storage"] = storage; }),
                      "version 3");
}

// A file of kuiper's int4 scheme (int8 token embedding, format version 3), damaged.
class DamagedMixedFile : public DamagedInt4File {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("int4_mixed_damaged");
    good_ = dir_ + "/good.kuiper";
    ASSERT_TRUE(save_kuiper(gptq_int4(stories260k(), 512), good_).ok());
  }
};

TEST_F(DamagedMixedFile, UnchangedVariantLoads) {
  EXPECT_TRUE(load_checkpoint(variant("same.kuiper", [](Tensors&, Metadata&) {})).ok());
}

TEST_F(DamagedMixedFile, RefusesInconsistentStorage) {
  expect_load_refused(variant("v2.kuiper", [](Tensors&, Metadata& m) { m["format_version"] = "2"; }), "version 3");
  expect_load_refused(variant("json.kuiper", [](Tensors&, Metadata& m) { m["matrix_storage"] = "{\"token_embedding\""; }),
                      "matrix_storage");
  expect_load_refused(variant("name.kuiper",
                              [](Tensors&, Metadata& m) {
                                m["matrix_storage"] = R"({"layers.9.wq": {"weights": "int8", "quantization": "int8-symmetric-grouped", "group_size": "64"}})";
                              }),
                      "layers.9.wq");
  expect_load_refused(variant("kind.kuiper",
                              [](Tensors&, Metadata& m) {
                                m["matrix_storage"] = R"({"token_embedding": {"weights": "int8", "quantization": "int4-min-grouped", "group_size": "64"}})";
                              }),
                      "token_embedding");
  // The embedding's storage left out: its int8 tensors are not the int4 the file then claims.
  expect_load_refused(variant("missing.kuiper", [](Tensors&, Metadata& m) { m["matrix_storage"] = "{}"; }),
                      "token_embedding");
}

TEST_F(DamagedInt4File, RefusesTruncatedFile) {
  const std::string cut = dir_ + "/truncated.kuiper";
  std::filesystem::copy_file(good_, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(good_) - 1);
  EXPECT_FALSE(load_checkpoint(cut).ok());
  EXPECT_FALSE(load_checkpoint(cut, {"kuiper"}).ok());
}

}  // namespace
}  // namespace kuiper
