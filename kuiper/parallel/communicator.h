// Collectives over the ranks of a tensor-parallel group (model/parallel_plan.h): every rank
// calls the same collective, in the same order, with tensors of the same shape. On CUDA they
// are NCCL's, one communicator per GPU of one process; on the CPU an in-process group of
// threads that sums in rank order, so that a split model can be tested without GPUs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kuiper/base/device.h"
#include "kuiper/tensor/tensor.h"

namespace kuiper::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // Replaces `values` (fp32, on this rank's device) by its elementwise sum over the ranks;
  // queued on `stream` (CPU: done on return).
  virtual Status all_reduce_sum(Tensor& values, Stream stream) = 0;
  // `whole` (fp32, ranks × part's elements) receives every rank's `part`, in rank order.
  virtual Status all_gather(const Tensor& part, Tensor& whole, Stream stream) = 0;
  // An fp32 tensor on this rank's device for the collectives above to work in. On CUDA, NCCL
  // registers it, with the same tensor of every other rank, as one symmetric window, where its
  // symmetric kernels run, of lower latency for the few kilobytes of a decode step's sums
  // (docs/tensor_parallel.md). Every rank makes the same tensors in the same order.
  virtual StatusOr<Tensor> shared_tensor(Shape shape) = 0;
  // What runs the collectives and where shared_tensor's tensors live, for reports.
  virtual std::string description() const = 0;
};

// One communicator per rank for `ranks` ranks of `device`: rank r of a CUDA group runs on GPU r
// (parallel/rank_threads.h binds each rank's thread to it). An error when the build has no NCCL
// or the machine has fewer GPUs.
StatusOr<std::vector<std::unique_ptr<Communicator>>> make_communicators(DeviceType device, int ranks);

// Whether NCCL `version` (as ncclGetVersion gives it, e.g. 23007 for 2.30.7) has symmetric
// kernels that wait for the kernel before them. NCCL launches them to overlap that kernel
// (programmatic dependent launch); from 2.28.0 until 2.30.7 they started without
// cudaGridDependencySynchronize, so a symmetric collective could read its input before the
// kernel writing it had finished (what that did here: docs/tensor_parallel.md). Where this does
// not hold, the NCCL communicator queues each collective with a full dependency on the work
// before it (base/full_dependency.h).
bool nccl_symmetric_kernels_wait(int version);

// The CPU group (in_process_communicator.cpp) and the NCCL one (nccl_communicator.cpp).
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int ranks);
StatusOr<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(int ranks);

}  // namespace kuiper::parallel
