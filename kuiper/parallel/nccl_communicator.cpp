// NCCL communicators for the GPUs of one process, made together in one NCCL group: rank r is
// GPU r. Each rank's thread queues its collectives on its model's stream, so that they are
// ordered with the kernels around them and can be recorded in the decode step's CUDA graph.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "kuiper/base/device.h"
#include "kuiper/base/full_dependency.h"
#include "kuiper/parallel/communicator.h"

namespace kuiper::parallel {
namespace {

Status nccl_status(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return ok_status();
  return internal_error(what + ": " + ncclGetErrorString(result));
}

std::string version_name(int version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

// Memory registered with a communicator, released when the last tensor over it goes (before the
// communicator: the model that holds the tensors is destroyed first).
struct Window {
  explicit Window(ncclComm_t comm) : comm(comm) {}
  ~Window() {
    if (window != nullptr) ncclCommWindowDeregister(comm, window);
    if (data != nullptr) ncclMemFree(data);
  }
  ncclComm_t comm;
  void* data = nullptr;
  ncclWindow_t window = nullptr;
};

// The fewest blocks a collective's kernel may take. NCCL otherwise takes as few as its cost model
// puts near the link's peak, which left the batched steps' all-reduces (32 rows of 4096 floats
// at two ranks) slow; at least 16 ran those steps faster and one-token decode no slower
// (docs/tensor_parallel.md has the figures).
constexpr int kMinCollectiveBlocks = 16;
// NCCL refuses a minimum without a maximum; this one is above its channel limit, which NCCL
// caps it to, as it does when none is given.
constexpr int kMaxCollectiveBlocks = 64;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int ranks, int version)
      : comm_(comm), rank_(rank), ranks_(ranks), version_(version) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }

  Status all_reduce_sum(Tensor& values, Stream stream) override {
    KUIPER_RETURN_IF_ERROR(check_fp32(values));
    const auto s = static_cast<cudaStream_t>(stream);
    return queue_collective(s, [&] {
      return nccl_status(ncclAllReduce(values.raw_data(), values.raw_data(), values.numel(), ncclFloat, ncclSum,
                                       comm_, s),
                         "ncclAllReduce of " + std::to_string(values.numel()) + " floats");
    });
  }

  Status all_gather(const Tensor& part, Tensor& whole, Stream stream) override {
    KUIPER_RETURN_IF_ERROR(check_fp32(part));
    KUIPER_RETURN_IF_ERROR(check_fp32(whole));
    if (whole.numel() != part.numel() * ranks_) {
      return invalid_argument("all_gather of " + std::to_string(part.numel()) + " elements from " +
                              std::to_string(ranks_) + " ranks into " + std::to_string(whole.numel()));
    }
    const auto s = static_cast<cudaStream_t>(stream);
    return queue_collective(s, [&] {
      return nccl_status(ncclAllGather(part.raw_data(), whole.raw_data(), part.numel(), ncclFloat, comm_, s),
                         "ncclAllGather of " + std::to_string(part.numel()) + " floats");
    });
  }

  // NCCL's own allocation (CUDA virtual memory, which its windows need), registered as a
  // symmetric window: a collective whose every buffer lies in one runs NCCL's symmetric kernels,
  // which read and write the peers' windows directly over NVLink. Where NCCL finds the GPUs
  // cannot (no direct peer access), the registration is a no-op and the collectives run as they
  // do in any memory.
  StatusOr<Tensor> shared_tensor(Shape shape) override {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * sizeof(float);
    const std::string what = std::to_string(bytes) + " bytes for collectives";
    auto window = std::make_shared<Window>(comm_);
    KUIPER_RETURN_IF_ERROR(nccl_status(ncclMemAlloc(&window->data, bytes), "ncclMemAlloc of " + what));
    KUIPER_RETURN_IF_ERROR(
        nccl_status(ncclCommWindowRegister(comm_, window->data, bytes, &window->window, NCCL_WIN_COLL_SYMMETRIC),
                    "ncclCommWindowRegister of " + what));
    void* data = window->data;
    return Tensor::view(Buffer::borrow(data, bytes, DeviceType::kCUDA, std::move(window)), 0, DataType::kFP32,
                        std::move(shape));
  }

  std::string description() const override {
    return "NCCL " + version_name(version_) + ", shared tensors in symmetric windows" +
           (kernels_wait() ? ""
                           : " (this NCCL's symmetric kernels do not wait for their input: each collective waits "
                             "for the kernel before it to finish)");
  }

 private:
  static Status check_fp32(const Tensor& t) {
    if (t.device() != DeviceType::kCUDA || t.dtype() != DataType::kFP32) {
      return unsupported("NCCL collectives here take fp32 GPU tensors");
    }
    return ok_status();
  }

  bool kernels_wait() const { return nccl_symmetric_kernels_wait(version_); }

  // A symmetric kernel of this NCCL that does not wait would otherwise start as soon as the
  // kernel writing its input lets its dependents go, which kuiper's GEMVs do first thing.
  template <typename Collective>
  Status queue_collective(cudaStream_t stream, Collective&& collective) const {
    return kernels_wait() ? collective() : queue_with_full_dependency(stream, collective);
  }

  ncclComm_t comm_;
  int rank_, ranks_, version_;
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(int ranks) {
  int version = 0;
  KUIPER_RETURN_IF_ERROR(nccl_status(ncclGetVersion(&version), "ncclGetVersion"));
  ncclUniqueId id;
  KUIPER_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  int current_gpu = 0;
  if (cudaGetDevice(&current_gpu) != cudaSuccess) return internal_error("cudaGetDevice failed");
  std::vector<ncclComm_t> comms(ranks);
  const std::string what = "NCCL communicators over " + std::to_string(ranks) + " GPUs";
  // Made in one group, as ncclCommInitAll makes them (which takes no config); the group is
  // always ended, and the caller's GPU restored, whatever fails.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = kMinCollectiveBlocks;
  config.maxCTAs = kMaxCollectiveBlocks;
  KUIPER_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), what));
  Status made = ok_status();
  for (int r = 0; r < ranks && made.ok(); ++r) {
    made = use_device(DeviceType::kCUDA, r);
    if (made.ok()) made = nccl_status(ncclCommInitRankConfig(&comms[r], ranks, id, r, &config), what);
  }
  const Status ended = nccl_status(ncclGroupEnd(), what);
  const Status restored = use_device(DeviceType::kCUDA, current_gpu);
  KUIPER_RETURN_IF_ERROR(made);
  KUIPER_RETURN_IF_ERROR(ended);
  KUIPER_RETURN_IF_ERROR(restored);
  std::vector<std::unique_ptr<Communicator>> group;
  for (int r = 0; r < ranks; ++r) group.push_back(std::make_unique<NcclCommunicator>(comms[r], r, ranks, version));
  return group;
}

}  // namespace kuiper::parallel
