// Device services for a build without CUDA: only host memory exists.
#include <cstring>

#include "kuiper/base/device.h"

namespace kuiper {

bool cuda_available() { return false; }

std::string cuda_unavailable_reason() {
  return "this build of kuiper has no CUDA support (configure with -DKUIPER_CUDA=ON)";
}

int cuda_device_count() { return 0; }

void profile_range_begin() {}
void profile_range_end() {}

Status use_device(DeviceType device, int) {
  return device == DeviceType::kCPU ? ok_status() : unsupported(cuda_unavailable_reason());
}

StatusOr<Allocator*> cuda_allocator() { return unsupported(cuda_unavailable_reason()); }

Allocator& pinned_host_allocator() { return cpu_allocator(); }

Status copy_bytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
                  size_t bytes, Stream) {
  if (dst_device != DeviceType::kCPU || src_device != DeviceType::kCPU) {
    return unsupported(cuda_unavailable_reason());
  }
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return ok_status();
}

Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                 DeviceType device, Stream) {
  if (device != DeviceType::kCPU) return unsupported(cuda_unavailable_reason());
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
  }
  return ok_status();
}

Status synchronize(Stream) { return ok_status(); }

StatusOr<Stream> create_stream(DeviceType device) {
  if (device != DeviceType::kCPU) return unsupported(cuda_unavailable_reason());
  return Stream{nullptr};
}

void destroy_stream(Stream) {}

StatusOr<DeviceMemoryInfo> cuda_memory_info() { return unsupported(cuda_unavailable_reason()); }

StatusOr<int> cuda_multiprocessors() { return unsupported(cuda_unavailable_reason()); }

StatusOr<double> cuda_copy_bandwidth_gbs(size_t) { return unsupported(cuda_unavailable_reason()); }

StatusOr<std::unique_ptr<DeviceGraph>> capture_graph(Stream, const std::function<Status()>&) {
  return unsupported(cuda_unavailable_reason());
}

}  // namespace kuiper
