// Hugging Face model directories against transformers itself: test/data/hf/ holds tiny random
// LlamaForCausalLM models saved by transformers and the logits and greedy tokens transformers
// computed for them (scripts/make_hf_fixtures.py). Also the safetensors container on its own,
// and every kind of damaged file or config refused with one clear line.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kuiper/base/half.h"
#include "kuiper/checkpoint/formats/hf_safetensors.h"
#include "kuiper/checkpoint/formats/hf_config.h"
#include "kuiper/checkpoint/formats/kuiper_format.h"
#include "kuiper/checkpoint/formats/llama2c_writer.h"
#include "kuiper/model/llama_model.h"
#include "kuiper/checkpoint/formats/safetensors.h"
#include "kuiper/model/weight_convert.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

using test::expect_load_refused;
using test::read_bytes;
using test::write_bytes;
using test::last_logits;

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::relative_error;

const std::string kLlama2 = "test/data/hf/llama2_tiny";
const std::string kLlama2Sharded = "test/data/hf/llama2_tiny_sharded";
const std::string kLlama3 = "test/data/hf/llama3_tiny";

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

void write_json(const std::string& path, const json& value) {
  const std::string text = value.dump(2);
  write_bytes(path, std::vector<char>(text.begin(), text.end()));
}

// transformers' outputs for one fixture model.
struct Reference {
  std::vector<int32_t> prompt, tokens, greedy;
  std::vector<std::vector<float>> logits;  // one row per position of `tokens`
  std::vector<float> inv_freq;
};

Reference load_reference(const std::string& model_dir) {
  const json r = read_json(test::source_path(model_dir + "/reference.json"));
  Reference ref;
  ref.prompt = r.at("prompt").get<std::vector<int32_t>>();
  ref.tokens = r.at("tokens").get<std::vector<int32_t>>();
  ref.greedy = r.at("greedy").get<std::vector<int32_t>>();
  ref.logits = r.at("logits").get<std::vector<std::vector<float>>>();
  ref.inv_freq = r.at("inv_freq").get<std::vector<float>>();
  return ref;
}

// Largest per-position ‖kuiper − reference‖ / ‖reference‖ over the first `positions` positions
// (all of them by default).
double max_logit_error(const Checkpoint& ckpt, const Reference& ref, size_t positions = 0) {
  if (positions == 0) positions = ref.tokens.size();
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, {});
  CHECK(model.ok()) << model.status().to_string();
  auto all = (*model)->forward_all(std::span(ref.tokens).first(positions), 0);
  CHECK(all.ok()) << all.status().to_string();
  CHECK_EQ(all->dim(0), static_cast<int64_t>(positions));
  double worst = 0;
  for (size_t i = 0; i < positions; ++i) {
    const float* row = all->data<float>() + i * all->dim(1);
    worst = std::max(worst, relative_error(row, ref.logits[i].data(), ref.logits[i].size()));
  }
  return worst;
}

// Prefill the prompt, then argmax token by token, as transformers' generate(do_sample=False).
std::vector<int32_t> greedy_tokens(const Checkpoint& ckpt, const std::vector<int32_t>& prompt, size_t count) {
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, {});
  CHECK(model.ok()) << model.status().to_string();
  std::vector<int32_t> out;
  auto logits = (*model)->forward(prompt, 0);
  for (size_t i = 0; i < count; ++i) {
    CHECK(logits.ok()) << logits.status().to_string();
    const float* v = logits->data<float>();
    const int32_t next = static_cast<int32_t>(std::max_element(v, v + logits->numel()) - v);
    out.push_back(next);
    const int32_t one[1] = {next};
    logits = (*model)->forward(one, static_cast<int>(prompt.size() + i));
  }
  return out;
}

Checkpoint load_or_die(const std::string& path) {
  auto ckpt = load_checkpoint(path);
  CHECK(ckpt.ok()) << ckpt.status().to_string();
  return std::move(ckpt).value();
}

// A scratch copy of a fixture directory, to damage.
std::string copy_model(const std::string& fixture, const std::string& name) {
  const std::string dir = test::scratch_dir("hf_" + name);
  fs::remove_all(dir);
  fs::copy(test::source_path(fixture), dir);
  return dir;
}

// Rewrites the JSON header of a safetensors file, keeping its data section byte for byte.
void edit_header(const std::string& path, const std::function<void(json&)>& edit) {
  const std::vector<char> bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  edit(header);
  const std::string text = header.dump();
  const uint64_t new_n = text.size();
  std::vector<char> out(8 + text.size());
  std::memcpy(out.data(), &new_n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  out.insert(out.end(), bytes.begin() + 8 + static_cast<int64_t>(n), bytes.end());
  write_bytes(path, out);
}

// ---- against transformers ----------------------------------------------------------------

TEST(HfCheckpoint, Llama2LikeMatchesTransformers) {
  const Reference ref = load_reference(kLlama2);
  const Checkpoint ckpt = load_or_die(test::source_path(kLlama2));
  const LlamaConfig& c = ckpt.config;
  EXPECT_EQ(c.summary(), "dim 64, hidden 176, 3 layers, 4 heads (4 kv), vocab 320, seq 128");
  EXPECT_FALSE(c.shared_classifier);
  EXPECT_FALSE(c.rope_scaling.enabled);
  EXPECT_EQ(c.rope_theta, 10000.f);
  EXPECT_EQ(c.eos_ids, std::vector<int32_t>{2});
  EXPECT_EQ(ckpt.format, "Hugging Face safetensors (fp32, model.safetensors)");

  const double error = max_logit_error(ckpt, ref);
  std::printf("llama2-like: max relative logit error vs transformers %.3g over %zu positions\n", error,
              ref.tokens.size());
  EXPECT_LT(error, 1e-4);
  EXPECT_EQ(greedy_tokens(ckpt, ref.prompt, ref.greedy.size()), ref.greedy);
}

TEST(HfCheckpoint, Llama3LikeMatchesTransformers) {
  const Reference ref = load_reference(kLlama3);
  const Checkpoint ckpt = load_or_die(test::source_path(kLlama3));
  const LlamaConfig& c = ckpt.config;
  EXPECT_EQ(c.summary(), "dim 128, hidden 192, 2 layers, 8 heads (2 kv), vocab 301, seq 256");
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.rope_theta, 500000.f);
  ASSERT_TRUE(c.rope_scaling.enabled);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 64);
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{2, 7}));

  // kuiper's LLaMA 3 frequency scaling against transformers' _compute_llama3_parameters.
  const std::vector<float> inv_freq = rope_inverse_frequencies(c);
  ASSERT_EQ(inv_freq.size(), ref.inv_freq.size());
  for (size_t i = 0; i < inv_freq.size(); ++i) EXPECT_NEAR(inv_freq[i], ref.inv_freq[i], 1e-6 * ref.inv_freq[i]) << i;

  const double error = max_logit_error(ckpt, ref);
  std::printf("llama3-like: max relative logit error vs transformers %.3g over %zu positions\n", error,
              ref.tokens.size());
  EXPECT_LT(error, 1e-4);
  EXPECT_EQ(greedy_tokens(ckpt, ref.prompt, ref.greedy.size()), ref.greedy);
}

// ---- the other families, against the float64 NumPy forward pass (scripts/reference_forward.py,
// written from transformers' modeling code; it matches transformers 5.17 on these fixtures to
// 7e-7, checked on the GPU machine with scripts/make_family_fixtures.py --check-transformers).

void expect_matches_reference(const std::string& dir, const std::string& summary, size_t positions = 0,
                              size_t greedy = 0) {
  const Reference ref = load_reference(dir);
  const Checkpoint ckpt = load_or_die(test::source_path(dir));
  EXPECT_EQ(ckpt.config.summary(), summary);
  const double error = max_logit_error(ckpt, ref, positions);
  std::printf("%s: max relative logit error vs the float64 reference %.3g\n", dir.c_str(), error);
  EXPECT_LT(error, 1e-4);
  if (greedy == 0) greedy = ref.greedy.size();
  EXPECT_EQ(greedy_tokens(ckpt, ref.prompt, greedy), std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + greedy));
}

TEST(HfFamilies, Qwen2BiasesAndTiedClassifier) {
  expect_matches_reference("test/data/hf/qwen2_tiny", "dim 64, hidden 160, 2 layers, 4 heads (2 kv), vocab 288, seq 256");
  const Checkpoint ckpt = load_or_die(test::source_path("test/data/hf/qwen2_tiny"));
  EXPECT_TRUE(ckpt.config.qkv_bias);
  EXPECT_FALSE(ckpt.config.output_bias);
  EXPECT_EQ(ckpt.config.rope_theta, 1e6f);
}

TEST(HfFamilies, Qwen3HeadNormsAndOwnHeadWidth) {
  expect_matches_reference("test/data/hf/qwen3_tiny", "dim 96, hidden 192, 2 layers, 6 heads (2 kv), vocab 300, seq 256");
  const Checkpoint ckpt = load_or_die(test::source_path("test/data/hf/qwen3_tiny"));
  EXPECT_TRUE(ckpt.config.qk_norm);
  EXPECT_EQ(ckpt.config.head_dim(), 24);
}

TEST(HfFamilies, LlamaWithAttentionAndMlpBiases) {
  expect_matches_reference("test/data/hf/llama_bias_tiny", "dim 64, hidden 128, 2 layers, 4 heads (4 kv), vocab 260, seq 128");
}

TEST(HfFamilies, MistralWithinItsSlidingWindow) {
  // Window 20: the first 20 positions attend as without a window; greedy decoding from the
  // 16-token prompt stays inside it for 4 tokens. A longer context is refused, not run wrong.
  expect_matches_reference("test/data/hf/mistral_tiny", "dim 64, hidden 176, 2 layers, 4 heads (2 kv), vocab 320, seq 256",
                           20, 4);
  const Checkpoint ckpt = load_or_die(test::source_path("test/data/hf/mistral_tiny"));
  EXPECT_EQ(ckpt.config.sliding_window, 20);
  ModelOptions options;
  options.context = 48;
  auto model = LlamaModel::create(ckpt.config, ckpt.weights, options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("sliding window of 20"), std::string::npos) << model.status().to_string();
}

TEST(HfFamilies, TensorsTheModelDoesNotUseAreNamed) {
  // A Qwen2 directory relabelled LlamaForCausalLM loads as LLaMA without biases: the biases it
  // leaves unread are reported, not dropped in silence.
  const std::string dir = test::scratch_dir("relabelled") + "/qwen2";
  std::filesystem::create_directories(dir);
  for (const char* f : {"model.safetensors", "config.json"}) {
    std::filesystem::copy_file(test::source_path(std::string("test/data/hf/qwen2_tiny/") + f), dir + "/" + f);
  }
  json config = read_json(dir + "/config.json");
  config["architectures"] = {"LlamaForCausalLM"};
  config["model_type"] = "llama";
  write_json(dir + "/config.json", config);
  const Checkpoint ckpt = load_or_die(dir);
  EXPECT_FALSE(ckpt.config.qkv_bias);
  ASSERT_EQ(ckpt.ignored_tensors.size(), 6u);  // q, k, v biases of 2 layers
  EXPECT_EQ(ckpt.ignored_tensors.front(), "model.layers.0.self_attn.k_proj.bias");
  EXPECT_TRUE(load_or_die(test::source_path("test/data/hf/qwen2_tiny")).ignored_tensors.empty());
}

TEST(HfFamilies, FamiliesRoundTripThroughKuiperFormat) {
  // The switches and their tensors survive an export to kuiper's own format.
  for (const char* dir : {"test/data/hf/qwen2_tiny", "test/data/hf/qwen3_tiny", "test/data/hf/llama_bias_tiny"}) {
    const Checkpoint hf = load_or_die(test::source_path(dir));
    const std::string path = test::scratch_dir("family_export") + "/model.kuiper";
    ASSERT_TRUE(save_kuiper(hf, path).ok()) << dir;
    const Checkpoint back = load_or_die(path);
    EXPECT_EQ(back.config.qkv_bias, hf.config.qkv_bias) << dir;
    EXPECT_EQ(back.config.qk_norm, hf.config.qk_norm) << dir;
    EXPECT_EQ(back.config.head_size, hf.config.head_size) << dir;
    const Reference ref = load_reference(dir);
    EXPECT_EQ(last_logits(back, ref.tokens), last_logits(hf, ref.tokens)) << dir;
  }
}

TEST(HfCheckpoint, ShardedEqualsSingleFile) {
  const Checkpoint single = load_or_die(test::source_path(kLlama2));
  const Checkpoint sharded = load_or_die(test::source_path(kLlama2Sharded));
  EXPECT_EQ(sharded.format, "Hugging Face safetensors (fp32, 3 shards)");
  const Reference ref = load_reference(kLlama2);
  EXPECT_EQ(last_logits(sharded, ref.tokens), last_logits(single, ref.tokens));
}

TEST(HfCheckpoint, Llama2cExportGivesTheSameLogits) {
  const Reference ref = load_reference(kLlama2);
  const Checkpoint hf = load_or_die(test::source_path(kLlama2));
  const std::string path = test::scratch_dir("hf_export") + "/llama2_tiny.bin";
  KUIPER_ASSERT_OK(save_llama2c_v1(hf, path));
  const Checkpoint exported = load_or_die(path);
  EXPECT_EQ(exported.format, "llama2.c v1 (fp32)");
  EXPECT_LT(max_logit_error(exported, ref), 1e-4);
  EXPECT_EQ(last_logits(exported, ref.tokens), last_logits(hf, ref.tokens));

  // v1 has no field for θ or scaling: exporting the LLaMA 3 model must fail, not lose them.
  const Status refused = save_llama2c_v1(load_or_die(test::source_path(kLlama3)), path + ".llama3");
  EXPECT_EQ(refused.code(), StatusCode::kUnsupported) << refused.to_string();
}

TEST(HfCheckpoint, Transformers4ConfigSpellingGivesTheSameModel) {
  // Before transformers 5, θ sat at the top level and the scaling under "rope_scaling".
  const std::string dir = copy_model(kLlama3, "v4_config");
  json config = read_json(dir + "/config.json");
  json rope = config.at("rope_parameters");
  config["rope_theta"] = rope.at("rope_theta");
  rope.erase("rope_theta");
  config.erase("rope_parameters");
  config.erase("head_dim");
  config["rope_scaling"] = rope;
  write_json(dir + "/config.json", config);
  const Reference ref = load_reference(kLlama3);
  EXPECT_LT(max_logit_error(load_or_die(dir), ref), 1e-4);
}

TEST(HfCheckpoint, SafetensorsFileGivenDirectlyLoadsItsDirectory) {
  const Checkpoint ckpt = load_or_die(test::source_path(kLlama3 + "/model.safetensors"));
  EXPECT_TRUE(ckpt.config.rope_scaling.enabled);
}

TEST(HfCheckpoint, HalfPrecisionFilesLoad) {
  // The fp32 fixture re-saved as BF16 and F16: loads, and stays close to transformers' fp32 logits.
  const Reference ref = load_reference(kLlama2);
  const SafetensorsFile src = *SafetensorsFile::open(test::source_path(kLlama2 + "/model.safetensors"));
  for (DataType dtype : {DataType::kBF16, DataType::kFP16}) {
    const std::string dir = copy_model(kLlama2, std::string("half_") + std::string(dtype_name(dtype)));
    SafetensorsWriter writer;
    for (const std::string& name : src.names()) {
      KUIPER_ASSERT_OK_AND_ASSIGN(Tensor t, src.tensor(name));
      KUIPER_ASSERT_OK_AND_ASSIGN(op::Weight half, convert_weight(op::Weight{t, Tensor(), 0}, dtype, cpu_allocator()));
      KUIPER_ASSERT_OK(writer.add(name, half.values));
    }
    KUIPER_ASSERT_OK(writer.write(dir + "/model.safetensors"));
    const Checkpoint ckpt = load_or_die(dir);
    EXPECT_EQ(ckpt.weights.layers[0].wq.dtype(), dtype);
    EXPECT_EQ(ckpt.weights.final_norm.dtype(), DataType::kFP32);
    EXPECT_LT(max_logit_error(ckpt, ref), dtype == DataType::kBF16 ? 3e-2 : 3e-3) << dtype_name(dtype);
  }
}

TEST(HfCheckpoint, UnpermuteInterleavesEachHeadsHalves) {
  // 2 heads of head_dim 4, one column: HF rows (h, half, i) hold 10h + 2i + half.
  Tensor hf = *Tensor::zeros_cpu(DataType::kINT32, {8, 1});
  const int32_t hf_rows[] = {0, 2, 1, 3, 10, 12, 11, 13};
  std::memcpy(hf.raw_data(), hf_rows, sizeof(hf_rows));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor out, unpermute_rope_rows(hf, 2));
  EXPECT_EQ(std::vector<int32_t>(out.data<int32_t>(), out.data<int32_t>() + 8),
            (std::vector<int32_t>{0, 1, 2, 3, 10, 11, 12, 13}));
  EXPECT_FALSE(unpermute_rope_rows(hf, 3).ok());
}

// ---- the safetensors container ---------------------------------------------------------------

TEST(Safetensors, ReadsWhatTransformersWrote) {
  KUIPER_ASSERT_OK_AND_ASSIGN(SafetensorsFile file, SafetensorsFile::open(test::source_path(kLlama3 + "/model.safetensors")));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.names().front(), "model.embed_tokens.weight");
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);  // tied: transformers saves the embedding only
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor norm, file.tensor("model.norm.weight"));
  EXPECT_EQ(norm.shape(), Shape{128});
  EXPECT_FALSE(norm.buffer()->owns_memory()) << "aligned fp32 is used in place";
  EXPECT_EQ(file.tensor("no.such").status().code(), StatusCode::kNotFound);
}

TEST(Safetensors, WriterRoundTripsEveryDtypeAligned) {
  std::mt19937 rng(11);
  SafetensorsWriter writer;
  std::vector<std::pair<std::string, Tensor>> added;
  // Added narrowest first, so the writer has to reorder them to keep each aligned.
  for (DataType dtype : {DataType::kINT8, DataType::kBF16, DataType::kFP16, DataType::kINT32, DataType::kFP32}) {
    for (int64_t rows : {3, 5}) {
      Tensor t = *Tensor::empty(dtype, {rows, 7}, cpu_allocator());
      for (size_t b = 0; b < t.nbytes(); ++b) static_cast<uint8_t*>(t.raw_data())[b] = static_cast<uint8_t>(rng());
      const std::string name = std::string(dtype_name(dtype)) + "." + std::to_string(rows);
      KUIPER_ASSERT_OK(writer.add(name, t));
      added.emplace_back(name, t);
    }
  }
  writer.set_metadata("format", "kuiper-test");
  EXPECT_FALSE(writer.add("fp32.3", added.front().second).ok()) << "duplicate name";
  EXPECT_FALSE(writer.add("__metadata__", added.front().second).ok());

  const std::string path = test::scratch_dir("safetensors_round_trip") + "/all.safetensors";
  KUIPER_ASSERT_OK(writer.write(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
  const std::vector<char> bytes = read_bytes(path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  EXPECT_EQ((8 + header_bytes) % 64, 0u) << "data section 64-byte aligned";

  KUIPER_ASSERT_OK_AND_ASSIGN(SafetensorsFile file, SafetensorsFile::open(path));
  EXPECT_EQ(file.metadata().at("format"), "kuiper-test");
  EXPECT_EQ(file.names().size(), added.size());
  for (const auto& [name, original] : added) {
    const SafetensorsEntry* entry = file.find(name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_EQ(entry->dtype_name, safetensors_dtype_name(original.dtype()));
    EXPECT_EQ(entry->offset % dtype_size(original.dtype()), 0u) << name;
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor back, file.tensor(name));
    EXPECT_EQ(back.dtype(), original.dtype());
    EXPECT_EQ(back.shape(), original.shape());
    EXPECT_EQ(std::memcmp(back.raw_data(), original.raw_data(), original.nbytes()), 0) << name;
    EXPECT_FALSE(back.buffer()->owns_memory()) << name << " should be a view of the mapping";
  }
}

TEST(Safetensors, MisalignedTensorIsCopied) {
  // Written by hand: a 3-byte I8 tensor puts the F32 after it at an odd offset.
  const std::string text = R"({"a":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  const uint64_t n = text.size();
  const char int8_values[3] = {1, 2, 3};
  const float values[2] = {1.5f, -2.25f};
  std::vector<char> bytes;
  for (auto [data, size] : {std::pair<const void*, size_t>{&n, 8}, {text.data(), text.size()},
                            {int8_values, 3}, {values, sizeof(values)}}) {
    const size_t at = bytes.size();
    bytes.resize(at + size);
    std::memcpy(bytes.data() + at, data, size);
  }
  const std::string path = test::scratch_dir("safetensors_misaligned") + "/odd.safetensors";
  write_bytes(path, bytes);
  KUIPER_ASSERT_OK_AND_ASSIGN(SafetensorsFile file, SafetensorsFile::open(path));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor b, file.tensor("b"));
  EXPECT_TRUE(b.buffer()->owns_memory()) << "unaligned data must be copied";
  EXPECT_EQ(b.data<float>()[0], 1.5f);
  EXPECT_EQ(b.data<float>()[1], -2.25f);
}

// ---- damaged files -----------------------------------------------------------------------

TEST(HfCheckpointErrors, DamagedSafetensors) {
  const auto damaged = [](const std::string& name, const std::function<void(const std::string&)>& damage,
                          const std::string& message_part) {
    const std::string dir = copy_model(kLlama3, name);
    damage(dir + "/model.safetensors");
    expect_load_refused(dir, message_part);
    expect_load_refused(dir, "model.safetensors");
  };
  const auto header_edit = [](const std::function<void(json&)>& edit) {
    return [edit](const std::string& path) { edit_header(path, edit); };
  };

  damaged("truncated", [](const std::string& p) {
    auto b = read_bytes(p);
    b.resize(b.size() - 100);
    write_bytes(p, b);
  }, "truncated");
  damaged("header_past_end", [](const std::string& p) {
    auto b = read_bytes(p);
    const uint64_t n = b.size();
    std::memcpy(b.data(), &n, 8);
    write_bytes(p, b);
  }, "exceeds the file");
  damaged("header_huge", [](const std::string& p) {
    auto b = read_bytes(p);
    const uint64_t n = uint64_t{1} << 40;
    std::memcpy(b.data(), &n, 8);
    write_bytes(p, b);
  }, "100 MB");
  damaged("tiny", [](const std::string& p) { write_bytes(p, {1, 2, 3}); }, "too short");
  damaged("not_json", [](const std::string& p) {
    auto b = read_bytes(p);
    b[8] = '#';
    write_bytes(p, b);
  }, "not valid JSON");
  damaged("offset_out_of_range", header_edit([](json& h) {
    auto& o = h["model.norm.weight"]["data_offsets"];
    o = {o[0].get<uint64_t>() + 1000000000, o[1].get<uint64_t>() + 1000000000};
  }), "run past the end");
  damaged("overlap", header_edit([](json& h) {
    h["model.norm.weight"]["data_offsets"] = h["model.layers.0.input_layernorm.weight"]["data_offsets"];
  }), "overlap");
  damaged("shape_vs_offsets", header_edit([](json& h) { h["model.norm.weight"]["shape"] = {127}; }),
          "needs 508");
  damaged("negative_offset", header_edit([](json& h) { h["model.norm.weight"]["data_offsets"][0] = -4; }),
          "non-negative");
  damaged("unknown_dtype", header_edit([](json& h) { h["model.norm.weight"]["dtype"] = "F33"; }),
          "unknown dtype 'F33'");
  damaged("f64", header_edit([](json& h) {
    h["model.norm.weight"]["dtype"] = "F64";
    h["model.norm.weight"]["shape"] = {64};
  }), "tensor 'model.norm.weight' has dtype F64");
  damaged("int_weight", header_edit([](json& h) { h["model.norm.weight"]["dtype"] = "I32"; }),
          "model.norm.weight' is int32");
}

TEST(HfCheckpointErrors, MissingTensorAndMissingShard) {
  // The file rewritten without one tensor (a valid file, just incomplete).
  const std::string dir = copy_model(kLlama3, "missing_tensor");
  const SafetensorsFile good = *SafetensorsFile::open(test::source_path(kLlama3 + "/model.safetensors"));
  SafetensorsWriter writer;
  for (const std::string& name : good.names()) {
    if (name != "model.layers.1.mlp.up_proj.weight") KUIPER_ASSERT_OK(writer.add(name, *good.tensor(name)));
  }
  KUIPER_ASSERT_OK(writer.write(dir + "/model.safetensors"));
  expect_load_refused(dir, "tensor 'model.layers.1.mlp.up_proj.weight' is missing from model.safetensors");

  const std::string sharded = copy_model(kLlama2Sharded, "missing_shard");
  fs::remove(sharded + "/model-00002-of-00003.safetensors");
  expect_load_refused(sharded, "lists shard 'model-00002-of-00003.safetensors', which cannot be read");

  const std::string escaping = copy_model(kLlama2Sharded, "escaping_shard");
  json index = read_json(escaping + "/model.safetensors.index.json");
  index["weight_map"]["model.norm.weight"] = "../llama3_tiny/model.safetensors";
  write_json(escaping + "/model.safetensors.index.json", index);
  expect_load_refused(escaping, "is not a file name in the model directory");

  const std::string lying = copy_model(kLlama2Sharded, "lying_index");
  index = read_json(lying + "/model.safetensors.index.json");
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  write_json(lying + "/model.safetensors.index.json", index);
  expect_load_refused(lying, "does not hold it");

  const std::string no_weights = copy_model(kLlama3, "no_weights");
  fs::remove(no_weights + "/model.safetensors");
  expect_load_refused(no_weights, "no model.safetensors");
  const std::string no_config = copy_model(kLlama3, "no_config");
  fs::remove(no_config + "/config.json");
  expect_load_refused(no_config, "no config.json");
}

TEST(HfCheckpointErrors, BadConfigs) {
  const auto bad_config = [](const std::string& name, const std::function<void(json&)>& edit,
                             const std::string& message_part) {
    const std::string dir = copy_model(kLlama3, "config_" + name);
    json config = read_json(dir + "/config.json");
    edit(config);
    write_json(dir + "/config.json", config);
    expect_load_refused(dir, message_part);
    expect_load_refused(dir, "config.json");
  };
  bad_config("heads", [](json& c) { c["num_attention_heads"] = 5; c.erase("head_dim"); }, "divisible");
  bad_config("kv_heads", [](json& c) { c["num_key_value_heads"] = 3; }, "kv heads");
  // A head width of its own (Qwen3's layout) is read, and then the weights must have its shapes.
  bad_config("head_dim", [](json& c) { c["head_dim"] = 32; }, "has shape [128, 128] but config.json implies [256, 128]");
  bad_config("hidden_vs_weights", [](json& c) { c["intermediate_size"] = 190; },
             "has shape [192, 128] but config.json implies [190, 128]");
  bad_config("missing_dim", [](json& c) { c.erase("hidden_size"); }, "missing hidden_size");
  bad_config("float_dim", [](json& c) { c["num_hidden_layers"] = 2.5; }, "num_hidden_layers is not a 32-bit integer");
  bad_config("yarn", [](json& c) { c["rope_parameters"]["rope_type"] = "yarn"; }, "rope type 'yarn' is not supported");
  bad_config("llama3_no_factor", [](json& c) { c["rope_parameters"].erase("factor"); }, "missing factor");
  bad_config("gemma_type", [](json& c) { c["model_type"] = "gemma"; c.erase("architectures"); },
             "neither model_type nor architectures names a model kuiper runs");
  bad_config("gemma_arch", [](json& c) { c["architectures"] = {"GemmaForCausalLM"}; }, "is not one kuiper runs");
  bad_config("type_vs_arch", [](json& c) { c["model_type"] = "qwen2"; }, "does not match LlamaForCausalLM");
  bad_config("qwen_window", [](json& c) { c["architectures"] = {"Qwen2ForCausalLM"}; c.erase("model_type");
                                          c["use_sliding_window"] = true; }, "use_sliding_window");
  bad_config("not_json", [](json& c) { c = "just a string"; }, "not a JSON object");

  // A switch whose tensors the files lack: the error names the first missing one.
  const std::string dir = copy_model(kLlama3, "config_bias");
  json config = read_json(dir + "/config.json");
  config["attention_bias"] = true;
  write_json(dir + "/config.json", config);
  expect_load_refused(dir, "tensor 'model.layers.0.self_attn.q_proj.bias' is missing");
}

}  // namespace
}  // namespace kuiper
