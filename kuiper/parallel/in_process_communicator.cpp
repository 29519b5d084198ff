// The CPU's communicator: ranks are threads of one process sharing a meeting point. Every rank
// computes the sum itself, over all ranks' buffers in rank order, so that each ends with the
// same bits whatever order the threads arrive in.
#include <barrier>
#include <cstring>

#include "kuiper/parallel/communicator.h"

namespace kuiper::parallel {
namespace {

struct Meeting {
  explicit Meeting(int ranks) : ranks(ranks), barrier(ranks), posted(ranks) {}
  const int ranks;
  std::barrier<> barrier;
  std::vector<const float*> posted;  // each rank's buffer during one collective
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Meeting> meeting, int rank) : meeting_(std::move(meeting)), rank_(rank) {}
  int rank() const override { return rank_; }
  int ranks() const override { return meeting_->ranks; }

  Status all_reduce_sum(Tensor& values, Stream) override {
    KUIPER_RETURN_IF_ERROR(check_host_fp32(values, "all_reduce_sum"));
    const int64_t n = values.numel();
    sum_.resize(static_cast<size_t>(n));
    std::fill(sum_.begin(), sum_.end(), 0.f);
    post(values.data<float>());
    for (const float* part : meeting_->posted) {
      for (int64_t i = 0; i < n; ++i) sum_[i] += part[i];
    }
    meeting_->barrier.arrive_and_wait();  // every rank has read every buffer
    std::memcpy(values.data<float>(), sum_.data(), n * sizeof(float));
    return ok_status();
  }

  Status all_gather(const Tensor& part, Tensor& whole, Stream) override {
    KUIPER_RETURN_IF_ERROR(check_host_fp32(part, "all_gather"));
    KUIPER_RETURN_IF_ERROR(check_host_fp32(whole, "all_gather"));
    const int64_t n = part.numel();
    if (whole.numel() != n * ranks()) {
      return invalid_argument("all_gather of " + std::to_string(n) + " elements from " + std::to_string(ranks()) +
                              " ranks into " + std::to_string(whole.numel()));
    }
    post(part.data<float>());
    for (int r = 0; r < ranks(); ++r) std::memcpy(whole.data<float>() + r * n, meeting_->posted[r], n * sizeof(float));
    meeting_->barrier.arrive_and_wait();
    return ok_status();
  }

  StatusOr<Tensor> shared_tensor(Shape shape) override {
    return Tensor::empty(DataType::kFP32, std::move(shape), cpu_allocator());
  }
  std::string description() const override { return "in-process sums on the CPU"; }

 private:
  static Status check_host_fp32(const Tensor& t, const char* what) {
    if (t.device() != DeviceType::kCPU || t.dtype() != DataType::kFP32) {
      return unsupported(std::string("the in-process communicator's ") + what + " takes fp32 host tensors");
    }
    return ok_status();
  }
  // Shows this rank's buffer to the others and waits until every rank has shown its own.
  void post(const float* data) {
    meeting_->posted[rank_] = data;
    meeting_->barrier.arrive_and_wait();
  }

  std::shared_ptr<Meeting> meeting_;
  int rank_;
  std::vector<float> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int ranks) {
  auto meeting = std::make_shared<Meeting>(ranks);
  std::vector<std::unique_ptr<Communicator>> group;
  for (int r = 0; r < ranks; ++r) group.push_back(std::make_unique<InProcessCommunicator>(meeting, r));
  return group;
}

}  // namespace kuiper::parallel
