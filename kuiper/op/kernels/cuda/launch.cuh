// Grid sizing shared by the simple element-wise kernels, and the overlapped launch of the decode
// GEMVs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace kuiper::op::cuda {

inline constexpr int kElementwiseThreads = 256;
inline constexpr int64_t kMaxGridY = 65535;  // the limit on gridDim.y (and z)

// Enough blocks to give every element a thread, capped: kernels loop (grid-stride) beyond it.
inline unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

// Programmatic dependent launch (Hopper), used for the decode GEMVs and one sequence's attention
// combine. Launched the ordinary way, a GEMV starts only after the kernel before it (the
// attention combine, another GEMV, or the first layer's norm) has fully drained, and HBM idles
// meanwhile. Launched with launch_overlapped, it is scheduled as soon as every block of that
// kernel has called let_next_kernel_start (the GEMVs do so first thing, the decode attention
// once its first loads are queued, the combine at its end), issues its first bursts of weights,
// and waits in wait_for_previous_kernel until that kernel has finished and its writes are
// visible. Before the wait it reads only weights and writes nothing (the combine reads nothing);
// every other kernel is launched the ordinary way, and waits for all earlier work. Each kernel
// finishes after its own wait, so the ordering holds down the stream.
//
// After the wait, read what the previous kernel wrote with load_after_wait, never with __ldg
// (nor through a `const __restrict__` pointer, which the compiler may turn into __ldg):
// ld.global.nc promises the data is constant while the kernel runs, and ptxas uses that promise
// to hoist the loads above the wait (ACQBULK in SASS). Then the GEMVs read x while the norm is
// still writing it, and model logits come out ~150% off while every kernel alone passes.
//
// Overlap pays for the GEMVs, whose weight stream can start before their input is ready; it
// lost with every decode kernel overlapped, because blocks of the attention combine and of the
// GEMV after it, launched early, sat on the multiprocessors while the attention ran. The combine
// alone takes little room, and it lets the GEMV start only at its end (docs/performance.md,
// "Measurements behind other choices").
// On GPUs before Hopper both device calls compile to nothing and the attribute is ignored.
// KUIPER_SERIAL_LAUNCH=1 in the environment launches these the ordinary way too: a check
// when a result is suspected of a race, and the baseline the overlap is measured against.
inline bool launches_overlap() {
  static const bool overlap = std::getenv("KUIPER_SERIAL_LAUNCH") == nullptr;
  return overlap;
}

__device__ __forceinline__ void let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// A coherent load (ld.global.ca): see above for why not __ldg.
template <typename T>
__device__ __forceinline__ T load_after_wait(const T* p) {
  return __ldca(p);
}

template <typename... Params, typename... Args>
cudaError_t launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                              cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = launches_overlap() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace kuiper::op::cuda
