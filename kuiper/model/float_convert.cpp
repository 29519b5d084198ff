#include "kuiper/model/float_convert.h"

#include "kuiper/base/half.h"

namespace kuiper {
namespace {

float load_as_float(const void* data, DataType dtype, int64_t i) {
  switch (dtype) {
    case DataType::kFP32: return static_cast<const float*>(data)[i];
    case DataType::kFP16: return fp16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    default: return 0.f;
  }
}

void store_from_float(void* data, DataType dtype, int64_t i, float v) {
  switch (dtype) {
    case DataType::kFP32: static_cast<float*>(data)[i] = v; break;
    case DataType::kFP16: static_cast<uint16_t*>(data)[i] = float_to_fp16(v); break;
    case DataType::kBF16: static_cast<uint16_t*>(data)[i] = float_to_bf16(v); break;
    default: break;
  }
}

}  // namespace

StatusOr<Tensor> convert_float_on_host(const Tensor& src, DataType dtype) {
  KUIPER_ASSIGN_OR_RETURN(Tensor host_src, src.device() == DeviceType::kCPU ? StatusOr<Tensor>(src)
                                                                            : src.to(cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(dtype, src.shape(), cpu_allocator()));
  const int64_t n = src.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i) {
    store_from_float(out.raw_data(), dtype, i, load_as_float(host_src.raw_data(), src.dtype(), i));
  }
  return out;
}

StatusOr<Tensor> place_fp32(const Tensor& tensor, Allocator& allocator) {
  if (tensor.dtype() != DataType::kFP32) {
    KUIPER_ASSIGN_OR_RETURN(Tensor converted, convert_float_on_host(tensor, DataType::kFP32));
    return converted.device() == allocator.device() ? converted : converted.to(allocator);
  }
  if (tensor.device() == allocator.device()) return tensor;
  return tensor.to(allocator);
}

}  // namespace kuiper
