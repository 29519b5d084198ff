// The few device services the layers above need without including any CUDA header: whether a
// GPU is there, copies between devices, and waiting for queued work. Implemented by
// device_cuda.cu in CUDA builds and by device_none.cpp otherwise.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "kuiper/base/allocator.h"
#include "kuiper/base/status.h"
#include "kuiper/base/types.h"

namespace kuiper {

// An opaque stream handle (a cudaStream_t on CUDA, unused on the CPU).
using Stream = void*;

// True when this build has CUDA and the machine has at least one usable GPU.
bool cuda_available();

// Why CUDA cannot be used, for error messages ("this build has no CUDA", "no GPU found").
std::string cuda_unavailable_reason();

// GPUs this process can use (0 without CUDA).
int cuda_device_count();

// Makes GPU `ordinal` the one this thread's CUDA work, streams and allocations go to (every
// thread starts on GPU 0). A no-op for the CPU.
Status use_device(DeviceType device, int ordinal);

// The CUDA allocator of this thread's GPU (a caching pool per GPU); an error when
// cuda_available() is false.
StatusOr<Allocator*> cuda_allocator();

// Page-locked host memory, for what the GPU copies to the host every step (a batch's logits): a
// copy into pageable memory goes through a driver staging buffer at a fraction of the link's
// speed. The CPU allocator when there is no GPU.
Allocator& pinned_host_allocator();

// The allocator for `device`, or an error when this build or machine has no such device.
StatusOr<Allocator*> allocator_for(DeviceType device);

// Copies `bytes` between any two devices. With a stream the copy is queued on it; CPU->CPU
// copies are immediate.
Status copy_bytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
                  size_t bytes, Stream stream = nullptr);

// Copies `rows` runs of `width` bytes from `src` (runs `src_pitch` bytes apart) to `dst` (runs
// `dst_pitch` apart), both on `device`: a block of one matrix into another.
Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                 DeviceType device, Stream stream = nullptr);

// Waits for all work queued on `stream` (no-op on the CPU).
Status synchronize(Stream stream);

// A stream of its own for work on `device` (nullptr, the immediate "stream", on the CPU).
StatusOr<Stream> create_stream(DeviceType device);
void destroy_stream(Stream stream);

struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
// Free and total memory of this thread's GPU.
StatusOr<DeviceMemoryInfo> cuda_memory_info();

// Streaming multiprocessors of the current GPU: what a kernel's grid must fill.
StatusOr<int> cuda_multiprocessors();

// Device-to-device copy bandwidth in GB/s (bytes read + written, median of several copies of
// `bytes`): the memory roofline that benchmarks compare against.
StatusOr<double> cuda_copy_bandwidth_gbs(size_t bytes);

// Marks the stretch of work a profiler should look at (cudaProfilerStart/Stop): benchmarks
// bracket their timed window so that tools/cuda_kernel_trace (or nsys with
// --capture-range=cudaProfilerApi) summarise only it. No effect without a profiler or CUDA.
void profile_range_begin();
void profile_range_end();

// Device work recorded once and replayed with a single launch (a CUDA graph): the decode step
// of a model is dozens of small kernels, and replaying them removes the launch gaps.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual Status launch(Stream stream) = 0;
};

// Records the work `body` queues on `stream` (which must not be the default stream) without
// running it. `body` must not synchronise or copy from pageable host memory.
StatusOr<std::unique_ptr<DeviceGraph>> capture_graph(Stream stream, const std::function<Status()>& body);

}  // namespace kuiper
