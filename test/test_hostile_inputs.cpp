// Library-level checks against hostile files and numbers (issue #18): non-regular files are
// refused before they are read, non-finite weights are found (--check-tensors) and never
// quantized, and a header's INT32_MIN vocab size is refused without negating it.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include "kuiper/base/regular_file.h"
#include "kuiper/checkpoint/check_tensors.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/checkpoint/formats/llama2c_header.h"
#include "kuiper/checkpoint/random_checkpoint.h"
#include "kuiper/model/int8_quantize.h"
#include "test_util.h"

namespace kuiper {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

std::string fifo_in(const std::string& dir) {
  const std::string path = dir + "/fifo";
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
  return path;
}

TEST(RegularFile, RefusesFifoDirectoryMissingAndSymlinkLoopWithoutBlocking) {
  const std::string dir = test::scratch_dir("regular_file");
  const std::string fifo = fifo_in(dir);
  EXPECT_TRUE(contains(check_regular_file(fifo).message(), "is a FIFO"));
  // Would block in open() for a writer that never comes, were the FIFO not refused first.
  EXPECT_TRUE(contains(read_regular_file(fifo).status().message(), "is a FIFO"));
  EXPECT_TRUE(contains(MappedFile::open(fifo).status().message(), "is a FIFO"));
  EXPECT_FALSE(is_gguf_file(fifo));
  EXPECT_FALSE(is_gguf_file(dir));
  EXPECT_TRUE(contains(read_regular_file(dir).status().message(), "is a directory"));
  EXPECT_TRUE(contains(read_regular_file(dir + "/missing").status().message(), "no such file"));
  std::filesystem::create_symlink("loop", dir + "/loop");
  EXPECT_TRUE(contains(read_regular_file(dir + "/loop").status().message(), "symbolic links"));
  EXPECT_TRUE(check_directory(dir).ok());
  EXPECT_TRUE(contains(check_directory(fifo).message(), "not a directory"));
}

TEST(RegularFile, ReadsARegularFileWhole) {
  const std::string path = test::scratch_dir("regular_file_read") + "/text";
  test::write_bytes(path, {'a', '\0', 'b'});
  auto content = read_regular_file(path);
  ASSERT_TRUE(content.ok()) << content.status().message();
  EXPECT_EQ(*content, std::string("a\0b", 3));
}

Checkpoint small_checkpoint() {
  auto checkpoint = make_random_checkpoint(test::model_shape(16, 32, 2, 2, 1, 32, 8), 7);
  EXPECT_TRUE(checkpoint.ok());
  checkpoint->path = "model.bin";
  return std::move(checkpoint).value();
}

TEST(CheckTensors, NamesTheFirstTensorHoldingNaNOrInf) {
  Checkpoint checkpoint = small_checkpoint();
  EXPECT_TRUE(check_tensors_finite(checkpoint).ok());
  checkpoint.weights.layers[1].w2.values.data<float>()[5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(check_tensors_finite(checkpoint).message(), "model.bin: tensor layers.1.w2 holds +Inf at element 5");
  checkpoint.weights.layers[0].ffn_norm.data<float>()[3] = std::nanf("");
  checkpoint.weights.layers[1].w2.values.data<float>()[5] = 0.f;
  EXPECT_EQ(check_tensors_finite(checkpoint).message(), "model.bin: tensor layers.0.ffn_norm holds NaN at element 3");
}

TEST(CheckTensors, ChecksTheScalesOfInt8Weights) {
  Checkpoint checkpoint = small_checkpoint();
  auto quantized = quantize_int8(checkpoint.weights.layers[0].wq.values, 16);
  ASSERT_TRUE(quantized.ok());
  quantized->scales.data<float>()[1] = -std::numeric_limits<float>::infinity();
  checkpoint.weights.layers[0].wq = *quantized;
  EXPECT_EQ(check_tensors_finite(checkpoint).message(), "model.bin: tensor layers.0.wq scales holds -Inf at element 1");
}

TEST(Int8Quantize, RefusesNonFiniteWeightsInsteadOfConvertingThemToIntegers) {
  std::mt19937 rng(3);
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    Tensor w = test::random_tensor({4, 16}, rng);
    w.data<float>()[17] = bad;
    auto q = quantize_int8(w, 16);
    ASSERT_FALSE(q.ok());
    EXPECT_TRUE(contains(q.status().message(), "element 17 is " + std::string(std::isnan(bad) ? "NaN" : "+Inf")));
  }
}

TEST(Llama2cHeader, SignedVocabSizeOfInt32MinIsRefusedNotNegated) {
  EXPECT_EQ(decode_signed_vocab(512).size, 512);
  EXPECT_TRUE(decode_signed_vocab(512).shared_classifier);
  EXPECT_EQ(decode_signed_vocab(-512).size, 512);
  EXPECT_FALSE(decode_signed_vocab(-512).shared_classifier);
  // -INT32_MIN does not exist; 0 is what LlamaConfig::validate refuses.
  EXPECT_EQ(decode_signed_vocab(std::numeric_limits<int32_t>::min()).size, 0);
}

// The loaders of both headers that use the signed vocab size, end to end.
TEST(Llama2cHeader, FilesWithVocabInt32MinAreRefusedWithOneLine) {
  const std::string dir = test::scratch_dir("vocab_int32_min");
  const int32_t v0[7] = {64, 172, 5, 8, 4, std::numeric_limits<int32_t>::min(), 512};
  const int32_t v3[8] = {64, 172, 5, 8, 4, std::numeric_limits<int32_t>::min(), 512, 64};
  for (const auto& [format, header, bytes] : {std::tuple{"llama2c-v0", static_cast<const void*>(v0), sizeof(v0)},
                                              std::tuple{"kuiperllama-v3", static_cast<const void*>(v3), sizeof(v3)}}) {
    std::vector<char> file(static_cast<const char*>(header), static_cast<const char*>(header) + bytes);
    file.resize(4096);
    const std::string path = dir + "/" + format + ".bin";
    test::write_bytes(path, file);
    auto loaded = load_checkpoint(path, {format});
    ASSERT_FALSE(loaded.ok()) << format;
    EXPECT_TRUE(contains(loaded.status().message(), path)) << format;
    EXPECT_TRUE(contains(loaded.status().message(), "vocab 0,")) << format;
  }
}

}  // namespace
}  // namespace kuiper
