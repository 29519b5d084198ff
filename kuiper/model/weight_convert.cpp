#include "kuiper/model/weight_convert.h"

#include <cstring>
#include <vector>

#include "kuiper/model/float_convert.h"
#include "kuiper/model/int4_quantize.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/model/dequantize.h"
#include "kuiper/model/weight_placement.h"

namespace kuiper {
namespace {

bool is_float(DataType d) {
  return d == DataType::kFP32 || d == DataType::kFP16 || d == DataType::kBF16;
}

// `weight` (host or device) as a host weight of another dtype: float <-> float, float or the
// other quantized type -> int8 (groups of kDefaultInt8GroupSize) or int4 (kDefaultInt4Scheme,
// groups of kDefaultInt4GroupSize), and int8/int4 -> float.
StatusOr<op::Weight> change_dtype(const op::Weight& weight, DataType dtype) {
  if ((dtype == DataType::kINT8 || dtype == DataType::kINT4) && weight.is_quantized()) {
    KUIPER_ASSIGN_OR_RETURN(Tensor values, dequantize_weight(weight));
    return change_dtype(op::Weight{std::move(values), Tensor(), 0}, dtype);
  }
  if (dtype == DataType::kINT8 && is_float(weight.dtype())) {
    return quantize_int8(weight.values, kDefaultInt8GroupSize);
  }
  if (dtype == DataType::kINT4 && is_float(weight.dtype())) {
    return quantize_int4(weight.values, kDefaultInt4GroupSize, kDefaultInt4Scheme);
  }
  const bool from_quantized = weight.is_quantized() && is_float(dtype);
  if (!from_quantized && (!is_float(weight.dtype()) || !is_float(dtype))) {
    return unsupported("cannot convert " + weight.values.describe() + " weights to " +
                       std::string(dtype_name(dtype)));
  }
  Tensor source = weight.values;
  if (from_quantized) {
    KUIPER_ASSIGN_OR_RETURN(source, dequantize_weight(weight));
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor values, convert_float_on_host(source, dtype));
  return op::Weight{std::move(values), Tensor(), 0};
}

}  // namespace

bool same_quantization(const op::Weight& a, const op::Weight& b) {
  return a.dtype() == b.dtype() && a.group_size == b.group_size && a.mins.is_empty() == b.mins.is_empty();
}

StatusOr<op::Weight> quantize_like(const op::Weight& weight, const op::Weight& like) {
  if (!like.is_quantized()) return invalid_argument("quantize_like: " + like.values.describe() + " is not quantized");
  if (same_quantization(weight, like)) return convert_weight(weight, weight.dtype(), cpu_allocator());
  Tensor source = weight.values;
  if (weight.is_quantized()) {
    KUIPER_ASSIGN_OR_RETURN(source, dequantize_weight(weight));
  }
  if (like.dtype() == DataType::kINT8) return quantize_int8(source, like.group_size);
  return quantize_int4(source, like.group_size, like.mins.is_empty() ? Int4Scheme::kSymmetric : Int4Scheme::kWithMin);
}

StatusOr<op::Weight> convert_weight(const op::Weight& weight, DataType dtype, Allocator& allocator) {
  op::Weight out = weight;
  if (weight.dtype() != dtype) {
    KUIPER_ASSIGN_OR_RETURN(out, change_dtype(weight, dtype));
  }
  return weight_on(out, allocator);
}

StatusOr<op::Weight> stack_rows(std::span<const op::Weight> parts, DataType dtype, Allocator& allocator) {
  if (parts.empty()) return invalid_argument("nothing to stack");
  std::vector<op::Weight> host;
  int64_t rows = 0;
  for (const op::Weight& part : parts) {
    KUIPER_ASSIGN_OR_RETURN(op::Weight converted, convert_weight(part, dtype, cpu_allocator()));
    if (converted.cols() != parts[0].cols() || (!host.empty() && !same_quantization(converted, host[0]))) {
      return invalid_argument("cannot stack " + part.values.describe() + " under " + parts[0].values.describe() +
                              " (columns, dtype, group size and int4 scheme must agree)");
    }
    rows += converted.rows();
    host.push_back(std::move(converted));
  }
  const int64_t cols = host[0].cols();
  op::Weight stacked{Tensor(), Tensor(), host[0].group_size, Tensor()};
  KUIPER_ASSIGN_OR_RETURN(stacked.values, Tensor::empty(dtype, {rows, host[0].values.dim(1)}, cpu_allocator()));
  // Values, scales and mins are each the parts' ones one after another.
  for (Tensor op::Weight::*member : {&op::Weight::scales, &op::Weight::mins}) {
    if ((host[0].*member).is_empty()) continue;
    KUIPER_ASSIGN_OR_RETURN(stacked.*member, Tensor::empty(DataType::kFP32, {rows * cols / stacked.group_size}, cpu_allocator()));
  }
  for (Tensor op::Weight::*member : {&op::Weight::values, &op::Weight::scales, &op::Weight::mins}) {
    size_t offset = 0;
    for (const op::Weight& part : host) {
      const Tensor& from = part.*member;
      if (from.is_empty()) continue;
      std::memcpy(static_cast<uint8_t*>((stacked.*member).raw_data()) + offset, from.raw_data(), from.nbytes());
      offset += from.nbytes();
    }
  }
  return convert_weight(stacked, dtype, allocator);
}

}  // namespace kuiper
