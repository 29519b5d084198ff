// Allocator, Buffer, MappedFile and Tensor: memory ownership, bounds checks and zero-copy views.
#include "kuiper/tensor/tensor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kuiper/base/mapped_file.h"
#include "test/test_util.h"

namespace kuiper {
namespace {

bool aligned_64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// Records every allocation and release, to see exactly when a Buffer gives its memory back.
class CountingAllocator final : public Allocator {
 public:
  DeviceType device() const override { return DeviceType::kCPU; }
  StatusOr<void*> allocate(size_t bytes) override {
    void* p = std::malloc(bytes);
    live[p] = bytes;
    return p;
  }
  void release(void* ptr, size_t bytes) override {
    EXPECT_EQ(live.at(ptr), bytes) << "released with a different size";
    live.erase(ptr);
    std::free(ptr);
  }
  size_t peak_bytes() const override { return 0; }

  std::map<void*, size_t> live;
};

// ---- Allocator --------------------------------------------------------------------------------

TEST(CpuAllocator, ReturnsWritable64ByteAlignedMemory) {
  Allocator& allocator = cpu_allocator();
  EXPECT_EQ(allocator.device(), DeviceType::kCPU);
  for (size_t bytes : {1, 3, 63, 64, 65, 1000, 4097}) {
    KUIPER_ASSERT_OK_AND_ASSIGN(void* p, allocator.allocate(bytes));
    EXPECT_TRUE(aligned_64(p)) << bytes;
    std::memset(p, 0xab, bytes);  // the whole request must be usable (ASan builds check this)
    allocator.release(p, bytes);
  }
}

TEST(CpuAllocator, ZeroBytesIsAnError) {
  EXPECT_EQ(cpu_allocator().allocate(0).status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuAllocator, PeakTracksTheHighWaterMark) {
  Allocator& allocator = cpu_allocator();
  constexpr size_t kBig = size_t{16} << 20;  // far above whatever else the test program holds
  KUIPER_ASSERT_OK_AND_ASSIGN(void* a, allocator.allocate(kBig));
  KUIPER_ASSERT_OK_AND_ASSIGN(void* b, allocator.allocate(kBig));
  const size_t peak_with_two = allocator.peak_bytes();
  EXPECT_GE(peak_with_two, 2 * kBig);
  allocator.release(a, kBig);
  allocator.release(b, kBig);
  EXPECT_EQ(allocator.peak_bytes(), peak_with_two) << "peak must not fall on release";
  KUIPER_ASSERT_OK_AND_ASSIGN(void* c, allocator.allocate(kBig));
  EXPECT_EQ(allocator.peak_bytes(), peak_with_two) << "one block is below the old peak";
  allocator.release(c, kBig);
}

TEST(CpuAllocator, AllocatorForDevice) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Allocator* cpu, allocator_for(DeviceType::kCPU));
  EXPECT_EQ(cpu, &cpu_allocator());
  if (!cuda_available()) {
    EXPECT_EQ(allocator_for(DeviceType::kCUDA).status().code(), StatusCode::kUnsupported);
  }
}

// ---- Buffer -----------------------------------------------------------------------------------

TEST(Buffer, OwningBufferReleasesWhenLastReferenceGoes) {
  CountingAllocator allocator;
  KUIPER_ASSERT_OK_AND_ASSIGN(auto buffer, Buffer::allocate(100, allocator));
  EXPECT_TRUE(buffer->owns_memory());
  EXPECT_EQ(buffer->size(), 100u);
  EXPECT_EQ(buffer->device(), DeviceType::kCPU);
  ASSERT_EQ(allocator.live.size(), 1u);
  EXPECT_EQ(allocator.live.begin()->first, buffer->data());
  auto second = buffer;
  buffer.reset();
  EXPECT_EQ(allocator.live.size(), 1u) << "released while still referenced";
  second.reset();
  EXPECT_TRUE(allocator.live.empty());
}

TEST(Buffer, BorrowedBufferKeepsItsOwnerAliveAndFreesNothing) {
  auto owner = std::make_shared<std::vector<float>>(10, 1.5f);
  std::weak_ptr<std::vector<float>> watch = owner;
  auto buffer = Buffer::borrow(owner->data(), owner->size() * sizeof(float), DeviceType::kCPU,
                               owner);
  owner.reset();
  EXPECT_FALSE(watch.expired()) << "borrowed memory must outlive the caller's reference";
  EXPECT_FALSE(buffer->owns_memory());
  EXPECT_EQ(static_cast<float*>(buffer->data())[9], 1.5f);
  buffer.reset();
  EXPECT_TRUE(watch.expired());
}

// ---- MappedFile -------------------------------------------------------------------------------

std::string write_file(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(MappedFile, MapsTheWholeFile) {
  const std::string dir = test::scratch_dir("mapped_file");
  const std::string contents = std::string("kuiper\0bytes", 12);
  const std::string path = write_file(dir, "data.bin", contents);
  KUIPER_ASSERT_OK_AND_ASSIGN(auto file, MappedFile::open(path));
  EXPECT_EQ(file->path(), path);
  ASSERT_EQ(file->size(), contents.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->data()), file->size()), contents);
}

TEST(MappedFile, MissingFileIsNotFoundAndNamesThePath) {
  const std::string path = test::scratch_dir("mapped_missing") + "/no_such_model.bin";
  const auto result = MappedFile::open(path);
  EXPECT_EQ(result.status().code(), StatusCode::kNotFound);
  EXPECT_NE(result.status().message().find(path), std::string::npos) << result.status().message();
}

TEST(MappedFile, EmptyFileAndDirectoryAreErrorsNamingThePath) {
  const std::string dir = test::scratch_dir("mapped_bad");
  const std::string empty = write_file(dir, "empty.bin", "");
  for (const std::string& path : {empty, dir}) {
    const auto result = MappedFile::open(path);
    ASSERT_FALSE(result.ok()) << path;
    EXPECT_NE(result.status().message().find(path), std::string::npos)
        << result.status().message();
  }
  EXPECT_EQ(MappedFile::open(empty).status().code(), StatusCode::kInvalidFormat);
}

TEST(MappedFile, TensorViewKeepsTheMappingAlive) {
  const std::vector<float> values = {1.f, -2.f, 3.5f, 8.f};
  const std::string path = write_file(
      test::scratch_dir("mapped_view"), "w.bin",
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  Tensor view;
  {
    KUIPER_ASSERT_OK_AND_ASSIGN(auto file, MappedFile::open(path));
    auto buffer = Buffer::borrow(const_cast<uint8_t*>(file->data()), file->size(),
                                 DeviceType::kCPU, file);
    KUIPER_ASSERT_OK_AND_ASSIGN(view, Tensor::view(buffer, 4, DataType::kFP32, {3}));
  }
  // The MappedFile handle is gone; reading here would fault if the view did not hold it.
  EXPECT_EQ(view.data<float>()[0], -2.f);
  EXPECT_EQ(view.data<float>()[2], 8.f);
}

// ---- Tensor -----------------------------------------------------------------------------------

Tensor iota_tensor(const Shape& shape) {
  auto t = Tensor::zeros_cpu(DataType::kFP32, shape);
  CHECK(t.ok());
  std::iota(t->data<float>(), t->data<float>() + t->numel(), 0.f);
  return std::move(t).value();
}

TEST(Tensor, DefaultIsEmpty) {
  const Tensor t;
  EXPECT_TRUE(t.is_empty());
  EXPECT_EQ(t.device(), DeviceType::kCPU);
}

TEST(Tensor, EmptyHasShapeStridesAndAlignedMemory) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::empty(DataType::kBF16, {3, 5, 7}, cpu_allocator()));
  EXPECT_FALSE(t.is_empty());
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 210u);
  EXPECT_EQ(t.dim(-1), 7);
  EXPECT_EQ(t.dim(0), 3);
  EXPECT_EQ(t.strides(), (Shape{35, 7, 1}));
  EXPECT_EQ(t.dtype(), DataType::kBF16);
  EXPECT_TRUE(aligned_64(t.raw_data()));
  EXPECT_GE(t.buffer()->size(), t.nbytes());
  EXPECT_EQ(t.describe(), "bf16[3, 5, 7] on cpu");
}

TEST(Tensor, ZeroElementTensorIsStillATensor) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::empty(DataType::kFP32, {0, 4}, cpu_allocator()));
  EXPECT_FALSE(t.is_empty());
  EXPECT_EQ(t.numel(), 0);
}

TEST(Tensor, NegativeDimensionIsRejected) {
  EXPECT_EQ(Tensor::empty(DataType::kFP32, {2, -1}, cpu_allocator()).status().code(),
            StatusCode::kInvalidArgument);
  const Tensor t = iota_tensor({4});
  EXPECT_EQ(t.reshape({-2, -2}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Tensor, ZerosAreZero) {
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::zeros_cpu(DataType::kINT32, {67}));
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<int32_t>()[i], 0);
}

TEST(Tensor, ViewChecksBounds) {
  KUIPER_ASSERT_OK_AND_ASSIGN(auto buffer, Buffer::allocate(64, cpu_allocator()));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor whole, Tensor::view(buffer, 0, DataType::kFP32, {16}));
  EXPECT_EQ(whole.raw_data(), buffer->data());
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor tail, Tensor::view(buffer, 56, DataType::kFP16, {2, 2}));
  EXPECT_EQ(tail.raw_data(), static_cast<uint8_t*>(buffer->data()) + 56);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor at_end, Tensor::view(buffer, 64, DataType::kFP32, {0}));
  EXPECT_EQ(at_end.numel(), 0);

  EXPECT_EQ(Tensor::view(buffer, 0, DataType::kFP32, {17}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(Tensor::view(buffer, 4, DataType::kFP32, {16}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(Tensor::view(buffer, 65, DataType::kINT8, {0}).status().code(),
            StatusCode::kOutOfRange);
  // A huge offset must not wrap around the bounds arithmetic.
  EXPECT_EQ(Tensor::view(buffer, SIZE_MAX - 3, DataType::kINT8, {8}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(Tensor::view(nullptr, 0, DataType::kFP32, {1}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Tensor, SliceSharesMemory) {
  Tensor t = iota_tensor({5, 3});
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor rows, t.slice(1, 4));
  EXPECT_EQ(rows.shape(), (Shape{3, 3}));
  EXPECT_EQ(rows.buffer(), t.buffer());
  EXPECT_EQ(rows.data<float>(), t.data<float>() + 3);
  EXPECT_EQ(rows.data<float>()[0], 3.f);
  rows.data<float>()[8] = -1.f;  // last element of row 3
  EXPECT_EQ(t.data<float>()[11], -1.f);

  // Slicing a slice accumulates the offset.
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor inner, rows.slice(2, 3));
  EXPECT_EQ(inner.data<float>(), t.data<float>() + 9);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor none, t.slice(5, 5));
  EXPECT_EQ(none.numel(), 0);
}

TEST(Tensor, SliceRejectsBadRanges) {
  const Tensor t = iota_tensor({5, 3});
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{-1, 2}, {3, 2}, {0, 6}, {6, 6}}) {
    EXPECT_EQ(t.slice(begin, end).status().code(), StatusCode::kOutOfRange)
        << begin << ".." << end;
  }
}

TEST(Tensor, SelectDropsTheFirstDimension) {
  Tensor t = iota_tensor({4, 2, 3});
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor row, t.select(2));
  EXPECT_EQ(row.shape(), (Shape{2, 3}));
  EXPECT_EQ(row.strides(), (Shape{3, 1}));
  EXPECT_EQ(row.data<float>(), t.data<float>() + 12);
  EXPECT_EQ(t.select(4).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t.select(-1).status().code(), StatusCode::kOutOfRange);

  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor vector, t.reshape({24}));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor scalar, vector.select(23));
  EXPECT_EQ(scalar.ndim(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.data<float>()[0], 23.f);
  EXPECT_EQ(scalar.slice(0, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(Tensor, ReshapeSharesMemory) {
  Tensor t = iota_tensor({6, 4});
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor r, t.reshape({2, 3, 4}));
  EXPECT_EQ(r.raw_data(), t.raw_data());
  EXPECT_EQ(r.strides(), (Shape{12, 4, 1}));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor row, t.slice(2, 4));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor flat, row.reshape({8}));
  EXPECT_EQ(flat.data<float>()[0], 8.f) << "reshape of a slice keeps the slice's offset";
  EXPECT_EQ(t.reshape({5, 5}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.reshape({}).status().code(), StatusCode::kInvalidArgument);  // 24 elements, not 1
}

TEST(Tensor, CopyFromAndToOnCpu) {
  const Tensor src = iota_tensor({3, 7});
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor dst, Tensor::zeros_cpu(DataType::kFP32, {21}));
  KUIPER_ASSERT_OK(dst.copy_from(src));  // element count matters, not shape
  for (int i = 0; i < 21; ++i) ASSERT_EQ(dst.data<float>()[i], static_cast<float>(i));

  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor copy, src.to(cpu_allocator()));
  EXPECT_NE(copy.raw_data(), src.raw_data());
  EXPECT_EQ(copy.shape(), src.shape());
  copy.data<float>()[0] = 100.f;
  EXPECT_EQ(src.data<float>()[0], 0.f) << "to() must copy, not alias";

  // Into a slice: only those rows change.
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor target, Tensor::zeros_cpu(DataType::kFP32, {5, 7}));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor middle, target.slice(1, 4));
  KUIPER_ASSERT_OK(middle.copy_from(src));
  EXPECT_EQ(target.data<float>()[6], 0.f);
  EXPECT_EQ(target.data<float>()[7], 0.f);
  EXPECT_EQ(target.data<float>()[27], 20.f);
  EXPECT_EQ(target.data<float>()[28], 0.f);
}

TEST(Tensor, CopyRejectsMismatches) {
  const Tensor src = iota_tensor({4});
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor half, Tensor::zeros_cpu(DataType::kFP16, {4}));
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor longer, Tensor::zeros_cpu(DataType::kFP32, {5}));
  Tensor nothing;
  EXPECT_EQ(half.copy_from(src).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(longer.copy_from(src).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nothing.copy_from(src).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(longer.copy_from(nothing).code(), StatusCode::kInvalidArgument);
}

TEST(Tensor, CopyToCudaWithoutCudaIsUnsupported) {
  if (cuda_available()) GTEST_SKIP() << "this machine has CUDA";
  std::vector<float> fake(4);
  auto buffer = Buffer::borrow(fake.data(), 16, DeviceType::kCUDA, nullptr);
  KUIPER_ASSERT_OK_AND_ASSIGN(Tensor device_tensor, Tensor::view(buffer, 0, DataType::kFP32, {4}));
  EXPECT_EQ(device_tensor.device(), DeviceType::kCUDA);
  EXPECT_EQ(device_tensor.copy_from(iota_tensor({4})).code(), StatusCode::kUnsupported);
}

TEST(Tensor, SlicesKeepTheBufferAlive) {
  CountingAllocator allocator;
  Tensor row;
  {
    KUIPER_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::empty(DataType::kFP32, {4, 4}, allocator));
    KUIPER_ASSERT_OK_AND_ASSIGN(row, t.select(3));
  }
  EXPECT_EQ(allocator.live.size(), 1u);
  row = Tensor();
  EXPECT_TRUE(allocator.live.empty());
}

}  // namespace
}  // namespace kuiper
