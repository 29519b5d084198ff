// How the CPU kernels use the cores. OpenBLAS keeps a thread pool of its own that spins between
// calls; mixed with our OpenMP regions the two pools fight over the cores (prefill ran many
// times slower on 2 cores). So BLAS runs single-threaded and the kernels split work themselves,
// in one OpenMP pool.
#pragma once

#include <cstdint>

namespace kuiper::op::cpu {

// Makes BLAS calls single-threaded; idempotent, called when the CPU kernel table is built.
void use_single_threaded_blas();

// Whether `work` (a rough count of multiply-adds) pays for waking the other threads. Below
// this, a region costs more than it saves, and on a busy machine one descheduled thread stalls
// the whole region for a time slice.
constexpr bool worth_threads(int64_t work) { return work >= (int64_t{1} << 18); }

// Runs body(begin, end) over [0, count) split into one contiguous block per OpenMP thread (in
// parallel only when `work` — a rough count of multiply-adds — pays for the threads).
template <typename Body>
void parallel_blocks(int64_t count, int64_t work, const Body& body);

}  // namespace kuiper::op::cpu

#include <omp.h>

template <typename Body>
void kuiper::op::cpu::parallel_blocks(int64_t count, int64_t work, const Body& body) {
#pragma omp parallel if (worth_threads(work))
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = count * t / threads, end = count * (t + 1) / threads;
    if (begin < end) body(begin, end);
  }
}
