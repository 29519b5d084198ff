// One thread per rank of a tensor-parallel group, thread r bound to device r for its whole life
// (use_device), so that each rank's allocations, streams, CUDA graph and NCCL calls stay on its
// GPU. Work is handed to all ranks at once: their collectives meet each other, which a single
// thread queueing the ranks one after another could not arrange.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kuiper/base/device.h"

namespace kuiper::parallel {

class RankThreads {
 public:
  // Starts `ranks` threads on `device`; an error when one cannot be bound to its device.
  static StatusOr<std::unique_ptr<RankThreads>> start(DeviceType device, int ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int ranks() const { return static_cast<int>(threads_.size()); }
  // Runs work(r) on thread r for every rank, waits for all of them, and returns the lowest
  // failing rank's error.
  Status run(const std::function<Status(int rank)>& work);

 private:
  RankThreads() = default;
  void serve(int rank);

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<Status(int)>* work_ = nullptr;
  uint64_t generation_ = 0;  // counts handed-out works, so each thread runs each exactly once
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

}  // namespace kuiper::parallel
