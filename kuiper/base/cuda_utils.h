// Turning CUDA runtime errors into Status values. For CUDA translation units only (.cu files):
// it includes cuda_runtime.h, which CPU code must never see.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kuiper/base/status.h"

namespace kuiper {

// OK for cudaSuccess; otherwise an internal error naming the failed call and CUDA's reason
// ("cudaMalloc(4096 bytes): out of memory"). Out-of-memory becomes kResourceExhausted.
inline Status cuda_status(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return ok_status();
  std::string message = what + ": " + cudaGetErrorString(error);
  if (error == cudaErrorMemoryAllocation) return resource_exhausted(std::move(message));
  return internal_error(std::move(message));
}

inline cudaStream_t as_cuda_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace kuiper

// Returns from the enclosing function when a CUDA runtime call fails.
#define KUIPER_CUDA_RETURN_IF_ERROR(call) KUIPER_RETURN_IF_ERROR(::kuiper::cuda_status((call), #call))

// Checks the launch just queued (bad configuration, missing kernel image, earlier fault).
#define KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED(kernel_name) \
  KUIPER_RETURN_IF_ERROR(::kuiper::cuda_status(cudaGetLastError(), "launching " kernel_name))
