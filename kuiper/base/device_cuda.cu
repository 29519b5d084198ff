// Device services for CUDA builds: GPU discovery, a caching device allocator, copies and waits.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <cuda_profiler_api.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/base/device.h"

namespace kuiper {
namespace {

struct CudaProbe {
  bool available = false;
  int devices = 0;
  std::string reason;
};

// Asked once: the answer cannot change while the process runs, and the query is slow.
const CudaProbe& probe() {
  static const CudaProbe result = [] {
    CudaProbe p;
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    // On a machine without a GPU, and so without the NVIDIA driver's device node, the runtime
    // answers "CUDA driver version is insufficient": what the user needs to hear is that there
    // is no GPU. With the node present the driver really is too old, and that is said.
    std::error_code no_node;
    const bool no_device = error == cudaErrorNoDevice || (error == cudaSuccess && count == 0) ||
                           (error == cudaErrorInsufficientDriver && !std::filesystem::exists("/dev/nvidiactl", no_node));
    if (error == cudaSuccess && count > 0) {
      p.available = true;
      p.devices = count;
    } else {
      p.reason = no_device ? std::string("no CUDA device found")
                           : std::string("CUDA cannot be used: ") + cudaGetErrorString(error);
      cudaGetLastError();  // clear it, so that it does not surface as a later launch failure
    }
    return p;
  }();
  return result;
}

// A caching pool over cudaMalloc. Released blocks are kept and handed out again to requests
// of a similar size, so that once a model has run one token nothing calls cudaMalloc or
// cudaFree (both can synchronise the device, and neither may run during graph capture).
//
// Work is assumed to be ordered on one stream: a block released while queued kernels still
// use it may be handed to the next request at once, which is safe only if that request's
// work is queued behind them.
class CudaCachingAllocator final : public Allocator {
 public:
  DeviceType device() const override { return DeviceType::kCUDA; }

  StatusOr<void*> allocate(size_t bytes) override {
    if (bytes == 0) return invalid_argument("cannot allocate 0 bytes");
    const size_t size = round_up(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    // Best fit among cached blocks, but never one more than twice the size: a small tensor
    // must not pin a large block that a later large request needs.
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= 2 * size) {
      void* ptr = it->second;
      in_use_[ptr] = it->first;
      free_.erase(it);
      return ptr;
    }
    void* ptr = nullptr;
    cudaError_t error = cudaMalloc(&ptr, size);
    if (error == cudaErrorMemoryAllocation && !free_.empty()) {
      cudaGetLastError();
      KUIPER_RETURN_IF_ERROR(release_cached_blocks());  // cached blocks may be what is missing
      error = cudaMalloc(&ptr, size);
    }
    if (error != cudaSuccess) {
      cudaGetLastError();
      return cuda_status(error, "cudaMalloc(" + std::to_string(size) + " bytes, " +
                                    std::to_string(held_) + " already held)");
    }
    in_use_[ptr] = size;
    held_ += size;
    if (held_ > peak_) peak_ = held_;
    return ptr;
  }

  void release(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(ptr);
    if (it == in_use_.end()) {
      LOG(ERROR) << "CUDA allocator asked to release a pointer it did not hand out";
      return;
    }
    free_.emplace(it->second, ptr);
    in_use_.erase(it);
  }

  size_t peak_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

 private:
  // 512-byte steps for small blocks keep waste low; 2 MiB steps for large ones make weight-
  // and cache-sized requests of slightly different lengths share blocks.
  static size_t round_up(size_t bytes) {
    constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
    const size_t step = bytes < (size_t{1} << 20) ? kSmall : kLarge;
    return (bytes + step - 1) / step * step;
  }

  Status release_cached_blocks() {
    for (const auto& [size, ptr] : free_) {
      KUIPER_CUDA_RETURN_IF_ERROR(cudaFree(ptr));
      held_ -= size;
    }
    free_.clear();
    return ok_status();
  }

  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;        // cached blocks by size
  std::unordered_map<void*, size_t> in_use_;  // handed-out blocks and their (rounded) size
  size_t held_ = 0;                           // bytes currently taken from the driver
  size_t peak_ = 0;
};

cudaMemcpyKind copy_kind(DeviceType dst, DeviceType src) {
  if (src == DeviceType::kCPU) return dst == DeviceType::kCPU ? cudaMemcpyHostToHost
                                                              : cudaMemcpyHostToDevice;
  return dst == DeviceType::kCPU ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

}  // namespace

bool cuda_available() { return probe().available; }

std::string cuda_unavailable_reason() {
  return probe().available ? std::string("CUDA is available") : probe().reason;
}

int cuda_device_count() { return probe().devices; }

// A profiler that is not attached makes these calls no-ops; their status carries nothing to act on.
void profile_range_begin() { (void)cudaProfilerStart(); }
void profile_range_end() { (void)cudaProfilerStop(); }

Status use_device(DeviceType device, int ordinal) {
  if (device == DeviceType::kCPU) return ok_status();
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  if (ordinal < 0 || ordinal >= probe().devices) {
    return out_of_range("GPU " + std::to_string(ordinal) + " does not exist: this machine has " +
                        std::to_string(probe().devices));
  }
  return cuda_status(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
}

namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  DeviceType device() const override { return DeviceType::kCPU; }

  StatusOr<void*> allocate(size_t bytes) override {
    if (bytes == 0) return invalid_argument("cannot allocate 0 bytes");
    void* ptr = nullptr;
    // Portable: any thread's GPU (tensor-parallel ranks) copies into it at full speed.
    if (const cudaError_t error = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable); error != cudaSuccess) {
      cudaGetLastError();
      return cuda_status(error, "cudaHostAlloc(" + std::to_string(bytes) + " bytes)");
    }
    count_.add(bytes);
    return ptr;
  }

  void release(void* ptr, size_t bytes) override {
    cudaFreeHost(ptr);
    count_.remove(bytes);
  }

  size_t peak_bytes() const override { return count_.peak(); }

 private:
  ByteCount count_;
};

}  // namespace

Allocator& pinned_host_allocator() {
  if (!cuda_available()) return cpu_allocator();
  static PinnedHostAllocator* allocator = new PinnedHostAllocator;  // outlives tensors freed at exit
  return *allocator;
}

StatusOr<Allocator*> cuda_allocator() {
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  // One pool per GPU, since a cached block belongs to the GPU it was allocated on. Never
  // destroyed: tensors held in static objects release into them during exit.
  static const std::vector<CudaCachingAllocator*> pools = [] {
    std::vector<CudaCachingAllocator*> all;
    for (int d = 0; d < probe().devices; ++d) all.push_back(new CudaCachingAllocator);
    return all;
  }();
  int current = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  return static_cast<Allocator*>(pools[current]);
}

Status copy_bytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
                  size_t bytes, Stream stream) {
  if (bytes == 0) return ok_status();
  if (dst_device == DeviceType::kCPU && src_device == DeviceType::kCPU) {
    std::memcpy(dst, src, bytes);
    return ok_status();
  }
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  const cudaMemcpyKind kind = copy_kind(dst_device, src_device);
  if (stream != nullptr) {
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, kind, as_cuda_stream(stream)),
                       "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes)");
  }
  // Without a stream the copy is immediate and sees all work queued before it. cudaMemcpy
  // alone would not: it is ordered only with the legacy default stream, not with the
  // non-blocking streams models run on, and could read results still being computed.
  KUIPER_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return cuda_status(cudaMemcpy(dst, src, bytes, kind),
                     "cudaMemcpy(" + std::to_string(bytes) + " bytes)");
}

Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                 DeviceType device, Stream stream) {
  if (device == DeviceType::kCPU) {
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
    }
    return ok_status();
  }
  return cuda_status(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice,
                                       as_cuda_stream(stream)),
                     "cudaMemcpy2DAsync(" + std::to_string(rows) + " rows of " + std::to_string(width) + " bytes)");
}

Status synchronize(Stream stream) {
  if (!cuda_available()) return ok_status();  // nothing can have been queued
  // No stream: wait for everything (see copy_bytes for why not just the legacy stream).
  if (stream == nullptr) return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return cuda_status(cudaStreamSynchronize(as_cuda_stream(stream)), "cudaStreamSynchronize");
}

}  // namespace kuiper
