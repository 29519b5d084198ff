#include "all_reduce_bench.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kuiper/parallel/communicator.h"
#include "kuiper/parallel/rank_threads.h"

namespace kuiper::cli {

StatusOr<double> all_reduce_seconds(DeviceType device, int ranks, int64_t floats, int count, bool shared) {
  KUIPER_ASSIGN_OR_RETURN(auto comms, parallel::make_communicators(device, ranks));
  KUIPER_ASSIGN_OR_RETURN(auto threads, parallel::RankThreads::start(device, ranks));
  std::vector<Tensor> rows(ranks);
  std::vector<Stream> streams(ranks, nullptr);
  KUIPER_RETURN_IF_ERROR(threads->run([&](int r) -> Status {
    if (shared) {
      KUIPER_ASSIGN_OR_RETURN(rows[r], comms[r]->shared_tensor({floats}));
    } else {
      KUIPER_ASSIGN_OR_RETURN(Allocator * alloc, allocator_for(device));
      KUIPER_ASSIGN_OR_RETURN(rows[r], Tensor::empty(DataType::kFP32, {floats}, *alloc));
    }
    KUIPER_ASSIGN_OR_RETURN(streams[r], create_stream(device));
    return ok_status();
  }));
  std::vector<double> times;
  for (int rep = 0; rep < 7; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    KUIPER_RETURN_IF_ERROR(threads->run([&](int r) -> Status {
      for (int i = 0; i < count; ++i) KUIPER_RETURN_IF_ERROR(comms[r]->all_reduce_sum(rows[r], streams[r]));
      return synchronize(streams[r]);
    }));
    if (rep > 1) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  KUIPER_RETURN_IF_ERROR(threads->run([&](int r) {
    rows[r] = Tensor();
    destroy_stream(streams[r]);
    return ok_status();
  }));
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace kuiper::cli
