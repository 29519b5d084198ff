#include "kuiper/op/weight_groups.h"

namespace kuiper::op {

Status check_group_tensor(const Weight& weight, const Tensor& per_group, const std::string& kind,
                          const char* what) {
  const Tensor& v = weight.values;
  if (weight.group_size <= 0) {
    return invalid_argument(kind + " weight " + v.describe() + " has group size " + std::to_string(weight.group_size));
  }
  if (weight.numel() % weight.group_size != 0) {
    return invalid_argument(kind + " weight " + v.describe() + " has " + std::to_string(weight.numel()) +
                            " weights, not a multiple of its group size " + std::to_string(weight.group_size));
  }
  const int64_t groups = weight.numel() / weight.group_size;
  const DataType dtype = group_constants_dtype(v.device());
  if (per_group.is_empty() || per_group.dtype() != dtype || per_group.numel() != groups ||
      per_group.device() != v.device()) {
    return invalid_argument(kind + " weight " + v.describe() + " with group size " +
                            std::to_string(weight.group_size) + " needs " + std::to_string(groups) + " " +
                            std::string(dtype_name(dtype)) + " " + what + " on " +
                            std::string(device_name(v.device())) + ", got " +
                            (per_group.is_empty() ? std::string("none") : per_group.describe()));
  }
  return ok_status();
}

}  // namespace kuiper::op
