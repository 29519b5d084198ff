// NCCL communicators for the GPUs of one process, made together by ncclCommInitAll: rank r is
// GPU r. Each rank's thread queues its collectives on its model's stream, so that they are
// ordered with the kernels around them and can be recorded in the decode step's CUDA graph.
#include <cuda_runtime.h>
#include <nccl.h>

#include <numeric>
#include <string>

#include "kuiper/parallel/communicator.h"

namespace kuiper::parallel {
namespace {

Status nccl_status(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return ok_status();
  return internal_error(what + ": " + ncclGetErrorString(result));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int ranks) : comm_(comm), rank_(rank), ranks_(ranks) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }

  Status all_reduce_sum(Tensor& values, Stream stream) override {
    KUIPER_RETURN_IF_ERROR(check_fp32(values));
    return nccl_status(ncclAllReduce(values.raw_data(), values.raw_data(), values.numel(), ncclFloat, ncclSum,
                                     comm_, static_cast<cudaStream_t>(stream)),
                       "ncclAllReduce of " + std::to_string(values.numel()) + " floats");
  }

  Status all_gather(const Tensor& part, Tensor& whole, Stream stream) override {
    KUIPER_RETURN_IF_ERROR(check_fp32(part));
    KUIPER_RETURN_IF_ERROR(check_fp32(whole));
    if (whole.numel() != part.numel() * ranks_) {
      return invalid_argument("all_gather of " + std::to_string(part.numel()) + " elements from " +
                              std::to_string(ranks_) + " ranks into " + std::to_string(whole.numel()));
    }
    return nccl_status(ncclAllGather(part.raw_data(), whole.raw_data(), part.numel(), ncclFloat, comm_,
                                     static_cast<cudaStream_t>(stream)),
                       "ncclAllGather of " + std::to_string(part.numel()) + " floats");
  }

 private:
  static Status check_fp32(const Tensor& t) {
    if (t.device() != DeviceType::kCUDA || t.dtype() != DataType::kFP32) {
      return unsupported("NCCL collectives here take fp32 GPU tensors");
    }
    return ok_status();
  }

  ncclComm_t comm_;
  int rank_, ranks_;
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(int ranks) {
  std::vector<ncclComm_t> comms(ranks);
  std::vector<int> gpus(ranks);
  std::iota(gpus.begin(), gpus.end(), 0);
  KUIPER_RETURN_IF_ERROR(nccl_status(ncclCommInitAll(comms.data(), ranks, gpus.data()),
                                     "ncclCommInitAll over " + std::to_string(ranks) + " GPUs"));
  std::vector<std::unique_ptr<Communicator>> group;
  for (int r = 0; r < ranks; ++r) group.push_back(std::make_unique<NcclCommunicator>(comms[r], r, ranks));
  return group;
}

}  // namespace kuiper::parallel
