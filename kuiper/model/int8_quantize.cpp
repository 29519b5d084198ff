#include "kuiper/model/int8_quantize.h"

#include <algorithm>
#include <cmath>

#include "kuiper/model/quantize_common.h"
#include "kuiper/model/weight_placement.h"

namespace kuiper {

StatusOr<op::Weight> quantize_int8(const Tensor& values, int group_size) {
  KUIPER_ASSIGN_OR_RETURN(Tensor src, quantization_source(values, group_size));
  const int64_t groups = src.numel() / group_size;
  KUIPER_ASSIGN_OR_RETURN(Tensor q, Tensor::empty(DataType::kINT8, src.shape(), cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(Tensor scales, Tensor::empty(DataType::kFP32, {groups}, cpu_allocator()));
  const float* w = src.data<float>();
  int8_t* qv = q.data<int8_t>();
  float* sv = scales.data<float>();
#pragma omp parallel for schedule(static) if (groups > 1024)
  for (int64_t g = 0; g < groups; ++g) {
    const float* wg = w + g * group_size;
    float max_abs = 0.f;
    for (int i = 0; i < group_size; ++i) max_abs = std::max(max_abs, std::fabs(wg[i]));
    const float scale = max_abs / 127.f;
    sv[g] = scale;
    for (int i = 0; i < group_size; ++i) {
      // nearbyint rounds halves to even, like torch.round in the reference exporters. A group
      // of zeros has scale 0 and stays 0.
      const float r = scale > 0.f ? std::nearbyint(wg[i] / scale) : 0.f;
      qv[g * group_size + i] = static_cast<int8_t>(std::clamp(r, -127.f, 127.f));
    }
  }
  return op::Weight{std::move(q), std::move(scales), group_size};
}

StatusOr<Tensor> dequantize_int8(const op::Weight& weight) {
  KUIPER_RETURN_IF_ERROR(op::check_int8_weight(weight));
  KUIPER_ASSIGN_OR_RETURN(op::Weight host, weight_on_host(weight));
  KUIPER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(DataType::kFP32, host.values.shape(), cpu_allocator()));
  const int64_t n = out.numel();
  const int8_t* q = host.values.data<int8_t>();
  const float* s = host.scales.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i) o[i] = q[i] * s[op::int8_group_of(i, weight.group_size)];
  return out;
}

}  // namespace kuiper
