#include "kuiper/op/kernels/cuda/cuda_backend.cuh"

#include "kuiper/base/cuda_utils.h"

namespace kuiper::op {
namespace cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // what cuBLAS suggests for Hopper

}  // namespace

Status cublas_status(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return ok_status();
  return internal_error(std::string(what) + ": " + cublasGetStatusString(status));
}

CudaBackendState::~CudaBackendState() {
  if (cublas != nullptr) cublasDestroy(cublas);
  if (cublas_workspace != nullptr) allocator->release(cublas_workspace, kCublasWorkspaceBytes);
  if (head_arrivals != nullptr) allocator->release(head_arrivals, kHeadArrivalCounters * sizeof(int));
}

CudaBackendState& cuda_backend(const ExecutionContext& ctx) {
  return *static_cast<CudaBackendState*>(ctx.backend());
}

StatusOr<std::unique_ptr<BackendState>> create_backend_state(Stream stream, Allocator& allocator) {
  auto state = std::make_unique<CudaBackendState>();
  state->allocator = &allocator;
  KUIPER_ASSIGN_OR_RETURN(state->multiprocessors, cuda_multiprocessors());
  KUIPER_ASSIGN_OR_RETURN(state->cublas_workspace, allocator.allocate(kCublasWorkspaceBytes));
  KUIPER_ASSIGN_OR_RETURN(void* counters, allocator.allocate(kHeadArrivalCounters * sizeof(int)));
  state->head_arrivals = static_cast<int*>(counters);
  KUIPER_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(counters, 0, kHeadArrivalCounters * sizeof(int), as_cuda_stream(stream)));
  KUIPER_RETURN_IF_ERROR(cublas_status(cublasCreate(&state->cublas), "cublasCreate"));
  // The handle serves this context's stream only, so the stream is set once here; each call
  // sets the workspace it may use (cublas_handle), never cuBLAS's own pool, which a graph being
  // recorded cannot use.
  KUIPER_RETURN_IF_ERROR(cublas_status(cublasSetStream(state->cublas, as_cuda_stream(stream)), "cublasSetStream"));
  return std::unique_ptr<BackendState>(std::move(state));
}

StatusOr<cublasHandle_t> cublas_handle(const ExecutionContext& ctx, bool with_workspace) {
  CudaBackendState& state = cuda_backend(ctx);
  KUIPER_RETURN_IF_ERROR(cublas_status(
      cublasSetWorkspace(state.cublas, with_workspace ? state.cublas_workspace : nullptr,
                         with_workspace ? kCublasWorkspaceBytes : 0),
      "cublasSetWorkspace"));
  return state.cublas;
}

}  // namespace cuda

StatusOr<std::unique_ptr<BackendState>> create_cuda_backend_state(Stream stream, Allocator& allocator) {
  return cuda::create_backend_state(stream, allocator);
}

}  // namespace kuiper::op
