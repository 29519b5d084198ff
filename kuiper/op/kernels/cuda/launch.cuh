// Grid sizing shared by the simple element-wise kernels.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kuiper::op::cuda {

inline constexpr int kElementwiseThreads = 256;

// Enough blocks to give every element a thread, capped: kernels loop (grid-stride) beyond it.
inline unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

}  // namespace kuiper::op::cuda
