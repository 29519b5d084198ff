#include "kuiper/model/weight_placement.h"

#include <cstdio>

#include "kuiper/model/finite_values.h"
#include "kuiper/model/float_convert.h"
#include "kuiper/op/weight_groups.h"

namespace kuiper {

// The smallest magnitude that rounds to fp16's infinity (65504 plus half its last step).
constexpr float kFp16Overflow = 65520.f;

StatusOr<Tensor> group_constants_as(const Tensor& per_group, DataType dtype, const std::string& what) {
  if (dtype == DataType::kFP16 && per_group.dtype() == DataType::kFP32) {
    KUIPER_ASSIGN_OR_RETURN(Tensor source, place_fp32(per_group, cpu_allocator()));
    if (const int64_t bad = first_not_below(source.data<float>(), source.numel(), kFp16Overflow); bad >= 0) {
      char value[32];
      std::snprintf(value, sizeof(value), "%g", source.data<float>()[bad]);
      return out_of_range(what + ": " + value + " at group " + std::to_string(bad) +
                          " is beyond fp16's range (65504), which the CUDA kernels read it in");
    }
  }
  return convert_float_on_host(per_group, dtype);
}

StatusOr<op::Weight> weight_on(const op::Weight& weight, Allocator& allocator) {
  const DeviceType device = allocator.device();
  op::Weight placed = weight;
  if (weight.values.device() != device) {
    KUIPER_ASSIGN_OR_RETURN(placed.values, weight.values.to(allocator));
  }
  const DataType dtype = op::group_constants_dtype(device);
  for (auto [per_group, what] : {std::pair{&placed.scales, "scales"}, {&placed.mins, "mins"}}) {
    if (per_group->is_empty() || (per_group->device() == device && per_group->dtype() == dtype)) continue;
    KUIPER_ASSIGN_OR_RETURN(Tensor host, group_constants_as(*per_group, dtype, "weight " + weight.values.describe() +
                                                                                 " " + what));
    if (device == DeviceType::kCPU) {
      *per_group = std::move(host);
    } else {
      KUIPER_ASSIGN_OR_RETURN(*per_group, host.to(allocator));
    }
  }
  return placed;
}

StatusOr<op::Weight> weight_on_host(const op::Weight& weight) { return weight_on(weight, cpu_allocator()); }

}  // namespace kuiper
