// Causal grouped-query attention over an fp32 KV cache (contiguous, or paged: a pool of slots
// read through block tables), plus the cache write.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/cpu_threads.h"

namespace kuiper::op::cpu {
namespace {

Status check_positions(const Tensor& positions, int64_t context) {
  const int32_t* pos = positions.data<int32_t>();
  for (int64_t t = 0; t < positions.numel(); ++t) {
    if (pos[t] < 0 || pos[t] >= context) {
      return out_of_range("position " + std::to_string(pos[t]) + " outside a KV cache of " +
                          std::to_string(context) + " positions");
    }
  }
  return ok_status();
}

// Every row's sequence is a row of the block tables, and every block its positions reach is a
// block of the pool.
Status check_paged_kv(const PagedKv& paged, const Tensor& positions, int64_t cache_rows) {
  KUIPER_RETURN_IF_ERROR(check_paged_shapes(paged, positions, cache_rows));
  KUIPER_RETURN_IF_ERROR(expect_cpu(*paged.block_tables, DataType::kINT32, "block tables"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(*paged.row_sequence, DataType::kINT32, "row sequences"));
  const int64_t sequences = paged.block_tables->dim(0), width = paged.block_tables->dim(1);
  const int64_t blocks = cache_rows / paged.block_size;
  const int32_t* pos = positions.data<int32_t>();
  const int32_t* row_sequence = paged.row_sequence->data<int32_t>();
  for (int64_t t = 0; t < positions.numel(); ++t) {
    const int64_t s = row_sequence[t], used = pos[t] / paged.block_size + 1;
    if (s < 0 || s >= sequences || pos[t] < 0 || used > width) {
      return out_of_range("row " + std::to_string(t) + " (sequence " + std::to_string(s) + ", position " +
                          std::to_string(pos[t]) + ") is outside block tables " + paged.block_tables->describe());
    }
    const int32_t* table = paged.block_tables->data<int32_t>() + s * width;
    for (int64_t b = 0; b < used; ++b) {
      if (table[b] < 0 || table[b] >= blocks) {
        return out_of_range("sequence " + std::to_string(s) + " names block " + std::to_string(table[b]) +
                            " of a pool of " + std::to_string(blocks));
      }
    }
  }
  return ok_status();
}

// One query head over positions [0, length), position j in cache row slot_of(j):
// out = softmax(q·Kᵀ·scale)·V. The same arithmetic for both cache layouts, so a sequence's
// result does not depend on where its positions are kept.
template <typename SlotOf>
void attend_one(const float* q, const float* k_cache, const float* v_cache, int64_t length,
                int64_t kv_stride, const SlotOf& slot_of, int head_dim, float scale, float* scores,
                float* out) {
  float max_score = -INFINITY;
  for (int64_t j = 0; j < length; ++j) {
    const float* k = k_cache + slot_of(j) * kv_stride;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < head_dim; ++i) dot += q[i] * k[i];
    scores[j] = dot * scale;
    max_score = std::max(max_score, scores[j]);
  }
  float sum = 0.f;
  for (int64_t j = 0; j < length; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  const float inv_sum = 1.f / sum;
  std::fill(out, out + head_dim, 0.f);
  for (int64_t j = 0; j < length; ++j) {
    const float* v = v_cache + slot_of(j) * kv_stride;
    const float p = scores[j] * inv_sum;
#pragma omp simd
    for (int i = 0; i < head_dim; ++i) out[i] += p * v[i];
  }
}

}  // namespace

Status kv_store_fp32(const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& k_cache,
                     Tensor& v_cache, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(k, DataType::kFP32, "kv_store k"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(v, DataType::kFP32, "kv_store v"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(positions, DataType::kINT32, "kv_store positions"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(k_cache, DataType::kFP32, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(v_cache, DataType::kFP32, "value cache"));
  const int64_t kv_dim = k_cache.dim(-1), tokens = positions.numel();
  if (k.numel() != tokens * kv_dim || v.numel() != k.numel() ||
      v_cache.numel() != k_cache.numel()) {
    return invalid_argument("kv_store shapes do not fit: k " + k.describe() + ", cache " +
                            k_cache.describe());
  }
  KUIPER_RETURN_IF_ERROR(check_positions(positions, k_cache.dim(0)));
  const int32_t* pos = positions.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(k_cache.data<float>() + pos[t] * kv_dim, k.data<float>() + t * kv_dim,
                kv_dim * sizeof(float));
    std::memcpy(v_cache.data<float>() + pos[t] * kv_dim, v.data<float>() + t * kv_dim,
                kv_dim * sizeof(float));
  }
  return ok_status();
}

namespace {

Status check_attention_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                            const AttentionShape& shape, const Tensor& out) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(q, DataType::kFP32, "attention q"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(k_cache, DataType::kFP32, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(v_cache, DataType::kFP32, "value cache"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(positions, DataType::kINT32, "attention positions"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "attention output"));
  return check_attention_shapes(q, k_cache, v_cache, positions, shape, out);
}

// Every (row, head) pair in parallel; slots_of_row(t) maps row t's positions to cache rows.
template <typename SlotsOfRow>
void attend_rows(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                 const AttentionShape& shape, Tensor& out, const SlotsOfRow& slots_of_row) {
  const int n_heads = shape.n_heads, hd = shape.head_dim;
  const int64_t tokens = positions.numel();
  const int64_t q_dim = static_cast<int64_t>(n_heads) * hd, kv_dim = k_cache.dim(-1);
  const int32_t* pos = positions.data<int32_t>();
  const int group = shape.group();
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t jobs = tokens * n_heads;
  int64_t longest = 0;
  for (int64_t t = 0; t < tokens; ++t) longest = std::max<int64_t>(longest, pos[t] + 1);
#pragma omp parallel if (worth_threads(jobs * longest * hd))
  {
    // Scratch for one head's scores, reused across jobs and calls (grows once, never per token).
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(longest)) scores.resize(longest);
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const int64_t t = job / n_heads;
      const int h = static_cast<int>(job % n_heads);
      const int64_t kv_offset = static_cast<int64_t>(h / group) * hd;
      attend_one(q.data<float>() + t * q_dim + h * hd, k_cache.data<float>() + kv_offset,
                 v_cache.data<float>() + kv_offset, pos[t] + 1, kv_dim, slots_of_row(t), hd, scale, scores.data(),
                 out.data<float>() + t * q_dim + h * hd);
    }
  }
}

}  // namespace

Status attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& positions, const AttentionShape& shape, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_attention_args(q, k_cache, v_cache, positions, shape, out));
  KUIPER_RETURN_IF_ERROR(check_positions(positions, k_cache.dim(0)));
  attend_rows(q, k_cache, v_cache, positions, shape, out, [](int64_t) { return [](int64_t j) { return j; }; });
  return ok_status();
}

Status paged_attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& positions,
                            const PagedKv& paged, const AttentionShape& shape, Tensor& out,
                            const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_attention_args(q, k_cache, v_cache, positions, shape, out));
  KUIPER_RETURN_IF_ERROR(check_paged_kv(paged, positions, k_cache.dim(0)));
  const int32_t* row_sequence = paged.row_sequence->data<int32_t>();
  const int32_t* tables = paged.block_tables->data<int32_t>();
  const int64_t width = paged.block_tables->dim(1);
  const int block = paged.block_size;
  attend_rows(q, k_cache, v_cache, positions, shape, out, [=](int64_t t) {
    const int32_t* table = tables + row_sequence[t] * width;
    return [table, block](int64_t j) { return static_cast<int64_t>(table[j / block]) * block + j % block; };
  });
  return ok_status();
}

}  // namespace kuiper::op::cpu
