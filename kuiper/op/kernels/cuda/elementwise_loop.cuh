// The loop of the element-wise kernels over fp32 vectors: four elements per thread step where
// every pointer is 16-byte aligned, one otherwise. One 4-byte access per thread leaves these
// memory-bound kernels well short of the memory's bandwidth; four take 40-50% off the
// prefill's rounding and SwiGLU kernels (docs/performance.md, "Measurements behind other
// choices").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kuiper/op/kernels/cuda/element_types.cuh"
#include "kuiper/op/kernels/cuda/launch.cuh"

namespace kuiper::op::cuda {

// kWidth consecutive fp32 values, loaded and stored in one access when kWidth is 4.
template <int kWidth>
struct Floats {
  static_assert(kWidth == 1 || kWidth == 4);
  float v[kWidth];

  __device__ static Floats load(const float* p) {
    Floats f;
    if constexpr (kWidth == 4) {
      const float4 q = *reinterpret_cast<const float4*>(p);
      f.v[0] = q.x; f.v[1] = q.y; f.v[2] = q.z; f.v[3] = q.w;
    } else {
      f.v[0] = *p;
    }
    return f;
  }
  __device__ void store(float* p) const {
    if constexpr (kWidth == 4) {
      *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      *p = v[0];
    }
  }
  // Stored as T (fp32, or rounded to a 16-bit type: four values in one 8-byte store).
  template <typename T>
  __device__ void store_as(T* p) const {
    if constexpr (std::is_same_v<T, float>) {
      store(p);
    } else if constexpr (kWidth == 4) {
      alignas(8) T packed[4] = {from_float<T>(v[0]), from_float<T>(v[1]), from_float<T>(v[2]), from_float<T>(v[3])};
      *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(packed);
    } else {
      *p = from_float<T>(v[0]);
    }
  }
};

// Calls step.template operator()<W>(i) for every element index i of [0, n): W = kWidth for
// the whole groups, then W = 1 for the last n % kWidth elements. Grid-stride.
template <int kWidth, typename Step>
__device__ __forceinline__ void for_each_group(int64_t n, Step&& step) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t whole = n / kWidth * kWidth;
  for (int64_t i = first * kWidth; i < whole; i += stride * kWidth) step.template operator()<kWidth>(i);
  for (int64_t i = whole + first; i < n; i += stride) step.template operator()<1>(i);
}

// Whether every pointer is 16-byte aligned, as the 4-wide loop needs.
inline bool quads_aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (!aligned_to(p, 16)) return false;
  }
  return true;
}

// Calls f(std::integral_constant<int, kWide>{}) when `wide`, else f with <int, 1>: where the
// host picks a kernel's access width.
template <int kWide, typename F>
void with_width(bool wide, F&& f) {
  if (wide) {
    f(std::integral_constant<int, kWide>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// Calls launch(width, blocks), width 4 when every pointer is 16-byte aligned, else 1, with
// enough blocks for n / width steps.
template <typename Launch>
void launch_by_width(int64_t n, std::initializer_list<const void*> pointers, Launch&& launch) {
  with_width<4>(quads_aligned(pointers), [&](auto width) {
    launch(width, elementwise_blocks((n + width() - 1) / width()));
  });
}

}  // namespace kuiper::op::cuda
