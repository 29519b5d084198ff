// Queuing work that must not overlap the kernel before it. A kernel launched with programmatic
// dependent launch (Hopper) may start once the kernel before it lets its dependents go, and is
// trusted to wait (griddepcontrol.wait) before reading what that kernel writes. Code that
// launches such kernels without the wait (NCCL 2.28.0-2.30.6's symmetric collectives,
// parallel/communicator.h) is queued through this instead. CUDA code only: it takes a
// cudaStream_t.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "kuiper/base/status.h"

namespace kuiper {

// Runs `queue`, which queues work on `stream`, so that none of that work starts before
// everything queued on the stream earlier has finished and its writes are visible.
// - Stream being captured into a graph: the programmatic edges `queue` adds from the nodes
//   before it become full edges (no extra node).
// - Otherwise: an empty kernel, launched the ordinary way, goes first; it waits for the kernel
//   before it, and the work queued after may overlap only it.
Status queue_with_full_dependency(cudaStream_t stream, const std::function<Status()>& queue);

}  // namespace kuiper
