#include "kuiper/parallel/rank_threads.h"

namespace kuiper::parallel {

StatusOr<std::unique_ptr<RankThreads>> RankThreads::start(DeviceType device, int ranks) {
  if (ranks < 1) return invalid_argument("a tensor-parallel group needs at least one rank");
  std::unique_ptr<RankThreads> group(new RankThreads());
  group->results_.assign(ranks, ok_status());
  for (int r = 0; r < ranks; ++r) group->threads_.emplace_back(&RankThreads::serve, group.get(), r);
  // The first work binds each thread to its device.
  KUIPER_RETURN_IF_ERROR(group->run([device](int rank) { return use_device(device, rank); }));
  return group;
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Status RankThreads::run(const std::function<Status(int rank)>& work) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_ = &work;
  pending_ = ranks();
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [this] { return pending_ == 0; });
  work_ = nullptr;
  for (const Status& s : results_) {
    if (!s.ok()) return s;
  }
  return ok_status();
}

void RankThreads::serve(int rank) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const std::function<Status(int)>& work = *work_;
    lock.unlock();
    Status result = work(rank);
    lock.lock();
    results_[rank] = std::move(result);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace kuiper::parallel
