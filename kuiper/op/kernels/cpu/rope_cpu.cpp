#include "kuiper/op/kernel_shapes.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper::op::cpu {
namespace {

// Rotates each interleaved pair (x[2i], x[2i+1]) of every head in `rows` by the angle of its
// position. Positions are checked by the caller.
void rotate(float* x, int64_t tokens, int64_t width, const int32_t* positions, const float* cos,
            const float* sin, int head_dim) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = cos + static_cast<int64_t>(positions[t]) * half;
    const float* s = sin + static_cast<int64_t>(positions[t]) * half;
    float* row = x + t * width;
    for (int64_t h = 0; h < width; h += head_dim) {
      float* v = row + h;
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * c[i] - b * s[i];
        v[2 * i + 1] = a * s[i] + b * c[i];
      }
    }
  }
}

}  // namespace

Status rope(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos, const Tensor& sin,
            int head_dim, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(q, DataType::kFP32, "rope q"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(k, DataType::kFP32, "rope k"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(positions, DataType::kINT32, "rope positions"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(cos, DataType::kFP32, "rope cos table"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(sin, DataType::kFP32, "rope sin table"));
  KUIPER_RETURN_IF_ERROR(check_rope_shapes(q, k, positions, cos, sin, head_dim));
  const int64_t tokens = positions.numel();
  const int32_t* pos = positions.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (pos[t] < 0 || pos[t] >= cos.dim(0)) {
      return out_of_range("rope position " + std::to_string(pos[t]) + " outside table of " +
                          std::to_string(cos.dim(0)));
    }
  }
  rotate(q.data<float>(), tokens, q.dim(-1), pos, cos.data<float>(), sin.data<float>(), head_dim);
  rotate(k.data<float>(), tokens, k.dim(-1), pos, cos.data<float>(), sin.data<float>(), head_dim);
  return ok_status();
}

}  // namespace kuiper::op::cpu
