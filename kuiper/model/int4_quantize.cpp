#include "kuiper/model/int4_quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kuiper/model/quantize_common.h"
#include "kuiper/model/weight_placement.h"

namespace kuiper {

StatusOr<Tensor> int4_quantization_source(const Tensor& values, int group_size) {
  if (group_size <= 0 || group_size % 2 != 0) {
    return invalid_argument("int4 group size must be positive and even, got " + std::to_string(group_size));
  }
  if (values.ndim() == 2 && values.dim(1) % 2 != 0) {
    return invalid_argument("int4 packs two weights a byte along a row; " + values.describe() +
                            " has an odd number of columns");
  }
  return quantization_source(values, group_size);
}

StatusOr<op::Weight> int4_weight_from_codes(const Tensor& values, std::span<const Int4GroupCode> codes,
                                            int group_size, Int4Scheme scheme) {
  const int64_t groups = values.numel() / group_size;
  if (static_cast<int64_t>(codes.size()) != groups) {
    return invalid_argument("int4 weight " + values.describe() + " in groups of " + std::to_string(group_size) +
                            " needs " + std::to_string(groups) + " codes, got " + std::to_string(codes.size()));
  }
  const bool with_min = scheme == Int4Scheme::kWithMin;
  op::Weight out{Tensor(), Tensor(), group_size, Tensor()};
  KUIPER_ASSIGN_OR_RETURN(out.values, Tensor::empty(DataType::kINT4, {values.dim(0), values.dim(1) / 2}, cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(out.scales, Tensor::empty(DataType::kFP32, {groups}, cpu_allocator()));
  if (with_min) {
    KUIPER_ASSIGN_OR_RETURN(out.mins, Tensor::empty(DataType::kFP32, {groups}, cpu_allocator()));
  }
  const float* w = values.data<float>();
  auto* packed = out.values.data<uint8_t>();
#pragma omp parallel for schedule(static) if (groups > 1024)
  for (int64_t g = 0; g < groups; ++g) {
    const float* wg = w + g * group_size;
    const Int4GroupCode& code = codes[g];
    out.scales.data<float>()[g] = code.scale;
    if (with_min) out.mins.data<float>()[g] = code.min;
    uint8_t* dst = packed + g * group_size / 2;
    for (int i = 0; i < group_size; i += 2) {
      dst[i / 2] = static_cast<uint8_t>(int4_nibble_of(wg[i], code, with_min) | (int4_nibble_of(wg[i + 1], code, with_min) << 4));
    }
  }
  return out;
}

StatusOr<op::Weight> quantize_int4(const Tensor& values, int group_size, Int4Scheme scheme) {
  KUIPER_ASSIGN_OR_RETURN(Tensor src, int4_quantization_source(values, group_size));
  const bool with_min = scheme == Int4Scheme::kWithMin;
  std::vector<Int4GroupCode> codes(src.numel() / group_size);
  const float* w = src.data<float>();
  const int64_t groups = static_cast<int64_t>(codes.size());
#pragma omp parallel for schedule(static) if (groups > 1024)
  for (int64_t g = 0; g < groups; ++g) codes[g] = search_int4_code(w + g * group_size, group_size, with_min);
  return int4_weight_from_codes(src, codes, group_size, scheme);
}

StatusOr<Tensor> dequantize_int4(const op::Weight& weight) {
  KUIPER_RETURN_IF_ERROR(op::check_int4_weight(weight));
  KUIPER_ASSIGN_OR_RETURN(op::Weight host, weight_on_host(weight));
  KUIPER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(DataType::kFP32, {host.rows(), host.cols()}, cpu_allocator()));
  const int64_t n = out.numel();
  const auto* packed = host.values.data<uint8_t>();
  const float* scales = host.scales.data<float>();
  const bool with_min = !host.mins.is_empty();
  const float* mins = with_min ? host.mins.data<float>() : nullptr;
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = op::weight_group_of(i, host.group_size);
    o[i] = op::int4_value(op::int4_nibble(packed, i), scales[g], with_min ? mins[g] : 0.f, with_min);
  }
  return out;
}

}  // namespace kuiper
