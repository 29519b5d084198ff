// Where the q, k and v rows of one position go once a GEMV or GEMM has produced them stacked
// (q_rows, then kv_rows of k, then kv_rows of v): q rotated into its output, k rotated and v
// copied into the caches at the position, in the caches' dtype. Shared by the decode GEMV's
// kRopeKv epilogue (decode_gemv_epilogues.cuh) and the prefill kernel rope_kv_store (rope_kv.cu).
#pragma once

#include <cstdint>

#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {

struct RopeKvArgs {
  const int32_t* positions = nullptr;  // one per row of tokens
  const int32_t* slots = nullptr;      // the cache row of each token; null: its position
  const float* cos = nullptr;
  const float* sin = nullptr;
  int table_rows = 0, head_dim = 0, q_rows = 0, kv_rows = 0, context = 0;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DataType cache_dtype = DataType::kFP32;
};

// Checks `target` against stacked rows of width `rows` and `tokens` positions, and fills `a`.
Status rope_kv_args(const RopeKvTarget& target, int64_t rows, int64_t tokens, const Tensor& q_out,
                    RopeKvArgs& a);

template <typename T>
__device__ __forceinline__ void store_cache(void* cache, int64_t i, float v) {
  static_cast<T*>(cache)[i] = from_float<T>(v);
}
__device__ __forceinline__ void store_cache(const RopeKvArgs& a, void* cache, int64_t i, float v) {
  switch (a.cache_dtype) {
    case DataType::kFP16: store_cache<__half>(cache, i, v); break;
    case DataType::kBF16: store_cache<__nv_bfloat16>(cache, i, v); break;
    default: store_cache<float>(cache, i, v); break;
  }
}

// The rotation of the pair of stacked rows (row, row + 1) at position `pos`: none for v rows
// and for a position outside the rope tables. A lookup of its own so that a kernel can issue it
// early, while other reads are in flight.
struct RopeAngle {
  float cos = 1.f, sin = 0.f;
};
__device__ __forceinline__ RopeAngle rope_angle(const RopeKvArgs& a, int pos, int row) {
  const bool is_v = row >= a.q_rows + a.kv_rows;
  if (is_v || pos < 0 || pos >= a.table_rows) return {};
  const int region_row = row < a.q_rows ? row : row - a.q_rows;
  const int64_t freq = static_cast<int64_t>(pos) * (a.head_dim / 2) + (region_row % a.head_dim) / 2;
  return {a.cos[freq], a.sin[freq]};
}

// The pair (row, row + 1) at position `pos`, rotated by `angle`, q going to q_out and k, v to
// cache row `slot`. q_rows and kv_rows are multiples of head_dim, so a pair never straddles two
// regions or two heads. A slot outside the cache is not stored (as the kv_store kernel does).
__device__ __forceinline__ void rope_kv_pair(const RopeKvArgs& a, int pos, int slot, int row, float y0,
                                             float y1, RopeAngle angle, float* q_out) {
  const float r0 = y0 * angle.cos - y1 * angle.sin, r1 = y0 * angle.sin + y1 * angle.cos;
  if (row < a.q_rows) {
    q_out[row] = r0;
    q_out[row + 1] = r1;
  } else if (slot >= 0 && slot < a.context) {
    const bool is_v = row >= a.q_rows + a.kv_rows;
    void* cache = is_v ? a.v_cache : a.k_cache;
    const int region_row = row - a.q_rows - (is_v ? a.kv_rows : 0);
    const int64_t at = static_cast<int64_t>(slot) * a.kv_rows + region_row;
    store_cache(a, cache, at, r0);
    store_cache(a, cache, at + 1, r1);
  }
}
__device__ __forceinline__ void rope_kv_pair(const RopeKvArgs& a, int pos, int slot, int row, float y0,
                                             float y1, float* q_out) {
  rope_kv_pair(a, pos, slot, row, y0, y1, rope_angle(a, pos, row), q_out);
}

}  // namespace kuiper::op::cuda
