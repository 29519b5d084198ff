// Where the q, k and v rows of one position go once a GEMV or GEMM has produced them stacked
// (q_rows, then kv_rows of k, then kv_rows of v): q rotated into its output, k rotated and v
// copied into the caches at the position, in the caches' dtype. Shared by the decode GEMV's
// kRopeKv epilogue (decode_gemv.cuh) and the prefill kernel rope_kv_store (rope_kv.cu).
#pragma once

#include <cstdint>

#include "kuiper/op/kernel_table.h"
#include "kuiper/op/kernels/cuda/element_types.cuh"

namespace kuiper::op::cuda {

struct RopeKvArgs {
  const int32_t* positions = nullptr;  // one per row of tokens
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

// The pair of stacked rows (row, row + 1) at position `pos`, q going to q_out. q_rows and
// kv_rows are multiples of head_dim, so a pair never straddles two regions or two heads. A
// position outside the rope tables leaves the pair unrotated; one outside the cache is not
// stored (as the rope and kv_store kernels do).
__device__ __forceinline__ void rope_kv_pair(const RopeKvArgs& a, int pos, int row, float y0,
                                             float y1, float* q_out) {
  const bool is_v = row >= a.q_rows + a.kv_rows;
  const int region_row = row < a.q_rows ? row : row - a.q_rows - (is_v ? a.kv_rows : 0);
  if (!is_v && pos >= 0 && pos < a.table_rows) {
    const int64_t freq = static_cast<int64_t>(pos) * (a.head_dim / 2) + (region_row % a.head_dim) / 2;
    const float c = a.cos[freq], s = a.sin[freq];
    const float r0 = y0 * c - y1 * s, r1 = y0 * s + y1 * c;
    y0 = r0;
    y1 = r1;
  }
  if (row < a.q_rows) {
    q_out[row] = y0;
    q_out[row + 1] = y1;
  } else if (pos >= 0 && pos < a.context) {
    void* cache = is_v ? a.v_cache : a.k_cache;
    const int64_t at = static_cast<int64_t>(pos) * a.kv_rows + region_row;
    store_cache(a, cache, at, y0);
    store_cache(a, cache, at + 1, y1);
  }
}

}  // namespace kuiper::op::cuda
