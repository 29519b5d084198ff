// Streams, memory queries and graph capture for CUDA builds (see device.h).
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
