// The CUDA backend's per-context state (execution_context.h): the cuBLAS handle bound to the
// context's stream with its workspace, counters that kernels share between their blocks, and
// which kernels have had their launch attributes set.
// Made once with the context, so nothing is created lazily while a graph is being recorded.
#pragma once

#include <cublas_v2.h>

#include <unordered_set>

#include "kuiper/op/execution_context.h"

namespace kuiper::op::cuda {

inline constexpr int kHeadArrivalCounters = 1024;

struct CudaBackendState final : BackendState {
  ~CudaBackendState() override;

  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;
  Allocator* allocator = nullptr;
  int multiprocessors = 0;  // of the context's GPU, for kernels that size their grids to fill it
  // kHeadArrivalCounters counters, zeroed once here and left at zero by every kernel that uses
  // them: decode attention's ranges count themselves in per head (attention_decode_kernel.cuh).
  int* head_arrivals = nullptr;
  // Kernels whose function attributes (shared-memory size or carveout) were set for this
  // context's device: set on a kernel's first launch through the context.
  std::unordered_set<const void*> configured_kernels;
};

// The state of a CUDA context (one made by ExecutionContext::create on kCUDA).
CudaBackendState& cuda_backend(const ExecutionContext& ctx);

Status cublas_status(cublasStatus_t status, const char* what);

// The context's cuBLAS handle, set to use the context's workspace or none: without one cuBLAS
// cannot pick the algorithms that need it (split-K with a separate reduce kernel among them).
StatusOr<cublasHandle_t> cublas_handle(const ExecutionContext& ctx, bool with_workspace);

// Calls `configure` (returning Status) the first time `kernel` is launched through `ctx`.
template <typename Configure>
Status configure_kernel_once(const ExecutionContext& ctx, const void* kernel, Configure&& configure) {
  CudaBackendState& state = cuda_backend(ctx);
  if (state.configured_kernels.contains(kernel)) return ok_status();
  KUIPER_RETURN_IF_ERROR(configure());
  state.configured_kernels.insert(kernel);
  return ok_status();
}

}  // namespace kuiper::op::cuda
