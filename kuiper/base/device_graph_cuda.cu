// Streams, device queries (memory, multiprocessors), copy bandwidth and graph capture for CUDA builds (see device.h).
#include <algorithm>
#include <vector>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/base/device.h"

namespace kuiper {
namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  Status launch(Stream stream) override {
    KUIPER_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, as_cuda_stream(stream)));
    return ok_status();
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace

StatusOr<Stream> create_stream(DeviceType device) {
  if (device == DeviceType::kCPU) return Stream{nullptr};
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  cudaStream_t stream = nullptr;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream{stream};
}

void destroy_stream(Stream stream) {
  if (stream != nullptr) cudaStreamDestroy(as_cuda_stream(stream));
}

StatusOr<DeviceMemoryInfo> cuda_memory_info() {
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  DeviceMemoryInfo info;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

StatusOr<int> cuda_multiprocessors() {
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  int device = 0, count = 0;
  KUIPER_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  KUIPER_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

StatusOr<double> cuda_copy_bandwidth_gbs(size_t bytes) {
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<float> ms;
  // Everything allocated here is released below, whichever step fails.
  const Status status = [&]() -> Status {
    KUIPER_RETURN_IF_ERROR(cuda_status(cudaMalloc(&src, bytes), "cudaMalloc"));
    KUIPER_RETURN_IF_ERROR(cuda_status(cudaMalloc(&dst, bytes), "cudaMalloc"));
    KUIPER_RETURN_IF_ERROR(cuda_status(cudaMemset(src, 0x3c, bytes), "cudaMemset"));  // not zeros
    KUIPER_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&start), "cudaEventCreate"));
    KUIPER_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&stop), "cudaEventCreate"));
    for (int rep = 0; rep < 12; ++rep) {
      cudaEventRecord(start);
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
      cudaEventRecord(stop);
      KUIPER_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(stop), "copy bandwidth"));
      float t = 0;
      cudaEventElapsedTime(&t, start, stop);
      if (rep >= 2) ms.push_back(t);  // the first copies warm up
    }
    return ok_status();
  }();
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  KUIPER_RETURN_IF_ERROR(status);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

StatusOr<std::unique_ptr<DeviceGraph>> capture_graph(Stream stream, const std::function<Status()>& body) {
  if (stream == nullptr) return invalid_argument("graph capture needs a stream of its own");
  cudaStream_t s = as_cuda_stream(stream);
  KUIPER_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const Status recorded = body();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);  // always end, even after a failure
  if (!recorded.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return recorded;
  }
  KUIPER_RETURN_IF_ERROR(cuda_status(ended, "cudaStreamEndCapture"));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {
    cudaGraphDestroy(graph);
    return cuda_status(instantiated, "cudaGraphInstantiate");
  }
  return std::unique_ptr<DeviceGraph>(new CudaGraph(graph, exec));
}

}  // namespace kuiper
