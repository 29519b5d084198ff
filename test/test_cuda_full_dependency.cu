// queue_with_full_dependency (base/full_dependency.h) against the race it exists for: a kernel
// launched to overlap the one before it (programmatic dependent launch) that reads that kernel's
// output without waiting for it. The producer lets its dependents go first thing, as kuiper's
// GEMVs do, then writes a flag 5 ms later; the consumer reads the flag at once. Unordered, the
// consumer reads it before it is written (which shows the test can fail); ordered, after.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "kuiper/base/device.h"
#include "kuiper/base/full_dependency.h"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper {
namespace {

constexpr uint64_t kProducerNanoseconds = 5'000'000;

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void producer(int* flag) {
  op::cuda::let_next_kernel_start();
  const uint64_t start = now_ns();
  while (now_ns() - start < kProducerNanoseconds) __nanosleep(1000);
  *reinterpret_cast<volatile int*>(flag) = 1;
}

__global__ void consumer_without_wait(const int* flag, int* seen) {
  *seen = *reinterpret_cast<const volatile int*>(flag);
}

class FullDependency : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major < 9) GTEST_SKIP() << "programmatic dependent launch needs compute capability 9.0";
    if (!op::cuda::launches_overlap()) GTEST_SKIP() << "KUIPER_SERIAL_LAUNCH is set";
    auto stream = create_stream(DeviceType::kCUDA);
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    stream_ = static_cast<cudaStream_t>(*stream);
    ASSERT_EQ(cudaMalloc(&flags_, 2 * sizeof(int)), cudaSuccess);
    // Each kernel's first launch loads it (CUDA's lazy loading), which waits for the kernels
    // running: the cases below would not overlap for that reason alone.
    ASSERT_TRUE(queue(/*ordered=*/true).ok());
    ASSERT_TRUE(synchronize(stream_).ok());
  }
  void TearDown() override {
    if (flags_ != nullptr) cudaFree(flags_);
    if (stream_ != nullptr) destroy_stream(stream_);
  }

  // Queues producer, then the consumer (through queue_with_full_dependency when `ordered`).
  Status queue(bool ordered) {
    producer<<<1, 1, 0, stream_>>>(flags_);
    const std::function<Status()> consume = [this] {
      const cudaError_t e = op::cuda::launch_overlapped(consumer_without_wait, dim3(1), dim3(1), 0, stream_,
                                                        static_cast<const int*>(flags_), flags_ + 1);
      return e == cudaSuccess ? ok_status() : internal_error(cudaGetErrorString(e));
    };
    return ordered ? queue_with_full_dependency(stream_, consume) : consume();
  }

  // What the consumer read, after running the work directly or as a captured graph.
  int seen(bool ordered, bool graph) {
    EXPECT_EQ(cudaMemsetAsync(flags_, 0, 2 * sizeof(int), stream_), cudaSuccess);
    EXPECT_TRUE(synchronize(stream_).ok());
    if (graph) {
      auto recorded = capture_graph(stream_, [&] { return queue(ordered); });
      EXPECT_TRUE(recorded.ok()) << recorded.status().to_string();
      if (recorded.ok()) EXPECT_TRUE((*recorded)->launch(stream_).ok());
    } else {
      const Status queued = queue(ordered);
      EXPECT_TRUE(queued.ok()) << queued.to_string();
    }
    EXPECT_TRUE(synchronize(stream_).ok());
    int host = -1;
    EXPECT_EQ(cudaMemcpy(&host, flags_ + 1, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

  cudaStream_t stream_ = nullptr;
  int* flags_ = nullptr;
};

TEST_F(FullDependency, OverlappedConsumerReadsTooEarlyWithoutIt) {
  EXPECT_EQ(seen(/*ordered=*/false, /*graph=*/false), 0);
  EXPECT_EQ(seen(/*ordered=*/false, /*graph=*/true), 0);
}

TEST_F(FullDependency, ConsumerReadsTheProducersWriteWithIt) {
  EXPECT_EQ(seen(/*ordered=*/true, /*graph=*/false), 1);
  EXPECT_EQ(seen(/*ordered=*/true, /*graph=*/true), 1);
}

}  // namespace
}  // namespace kuiper
