// Moving a weight between the host and a device. Its values move as they are; its group
// constants (scales, mins) change into the dtype the destination's kernels read them in
// (op::group_constants_dtype: fp32 on the host, fp16 on CUDA), so host code always sees fp32.
#pragma once

#include <string>

#include "kuiper/base/allocator.h"
#include "kuiper/op/weight.h"

namespace kuiper {

// `weight` on the allocator's device (itself when it is there in that form already). fp32
// constants round to the nearest fp16; one beyond fp16's range is refused (group_constants_as).
StatusOr<op::Weight> weight_on(const op::Weight& weight, Allocator& allocator);

// `weight` with its tensors on the host, group constants in fp32.
StatusOr<op::Weight> weight_on_host(const op::Weight& weight);

// `per_group` (fp32 or fp16 group constants, host or device) as a host tensor in `dtype` (fp32
// or fp16), rounded to nearest. A value fp16 cannot hold is refused, naming `what` and its group,
// rather than stored as infinity.
StatusOr<Tensor> group_constants_as(const Tensor& per_group, DataType dtype, const std::string& what);

}  // namespace kuiper
