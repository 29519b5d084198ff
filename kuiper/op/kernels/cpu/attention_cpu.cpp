// Causal grouped-query attention over an fp32 KV cache, plus the cache write.
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

// One query head over cache rows [0, length): out = softmax(q·Kᵀ·scale)·V.
void attend_one(const float* q, const float* k_cache, const float* v_cache, int64_t length,
                int64_t kv_stride, int head_dim, float scale, float* scores, float* out) {
  float max_score = -INFINITY;
  for (int64_t j = 0; j < length; ++j) {
    const float* k = k_cache + j * kv_stride;
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
    const float* v = v_cache + j * kv_stride;
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

Status attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& positions, const AttentionShape& shape, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(q, DataType::kFP32, "attention q"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(k_cache, DataType::kFP32, "key cache"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(v_cache, DataType::kFP32, "value cache"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(positions, DataType::kINT32, "attention positions"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "attention output"));
  KUIPER_RETURN_IF_ERROR(check_attention_shapes(q, k_cache, v_cache, positions, shape, out));
  const int n_heads = shape.n_heads, hd = shape.head_dim;
  const int64_t tokens = positions.numel();
  const int64_t q_dim = static_cast<int64_t>(n_heads) * hd, kv_dim = k_cache.dim(-1);
  const int64_t context = k_cache.dim(0);
  KUIPER_RETURN_IF_ERROR(check_positions(positions, context));
  if (tokens == 0) return ok_status();  // nothing to do, and no last position to size work by

  const int32_t* pos = positions.data<int32_t>();
  const int group = n_heads / shape.n_kv_heads;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t jobs = tokens * n_heads;
  const int64_t work = jobs * (pos[tokens - 1] + 1) * hd;
#pragma omp parallel if (worth_threads(work))
  {
    // Scratch for one head's scores, reused across jobs and calls (grows once, never per token).
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(context)) scores.resize(context);
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const int64_t t = job / n_heads;
      const int h = static_cast<int>(job % n_heads);
      const int64_t kv_offset = static_cast<int64_t>(h / group) * hd;
      attend_one(q.data<float>() + t * q_dim + h * hd, k_cache.data<float>() + kv_offset,
                 v_cache.data<float>() + kv_offset, pos[t] + 1, kv_dim, hd, scale, scores.data(),
                 out.data<float>() + t * q_dim + h * hd);
    }
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
