// One lane's share of a 16-bit attention head row (head_dim 64 or 128), loaded in one access:
// the unit in which the decode and paged attention kernels stream K and V rows.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {

// kDims = head_dim / 32 consecutive elements of one head row, for this lane.
template <typename T, int kDims>
struct HeadSlice {
  static_assert(kDims == 2 || kDims == 4, "head_dim 64 or 128");
  using Bits = std::conditional_t<kDims == 4, uint2, uint32_t>;
  Bits bits;
  __device__ void load(const T* row, int lane) { bits = __ldg(reinterpret_cast<const Bits*>(row) + lane); }
  __device__ void widen(float (&out)[kDims]) const {
    if constexpr (kDims == 4) {
      const float2 a = widen_pair(bits.x, static_cast<const T*>(nullptr));
      const float2 b = widen_pair(bits.y, static_cast<const T*>(nullptr));
      out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
    } else {
      const float2 a = widen_pair(bits, static_cast<const T*>(nullptr));
      out[0] = a.x; out[1] = a.y;
    }
  }
};

}  // namespace kuiper::op::cuda
