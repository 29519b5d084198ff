// Floating-point tensors from one dtype (fp32, fp16, bf16) into another, on the host: what both
// weight conversion and quantization start from.
#pragma once

#include "kuiper/base/allocator.h"
#include "kuiper/tensor/tensor.h"

namespace kuiper {

// A host copy of `src` (host or device) in `dtype`, both floating point, rounded to nearest.
StatusOr<Tensor> convert_float_on_host(const Tensor& src, DataType dtype);

// An fp32 vector (norm weights) on the allocator's device; zero-copy on the CPU.
StatusOr<Tensor> place_fp32(const Tensor& tensor, Allocator& allocator);

}  // namespace kuiper
