#include "kuiper/op/int8_weight.h"

namespace kuiper::op {

Status check_int8_weight(const Weight& weight) {
  const Tensor& v = weight.values;
  if (v.is_empty() || v.dtype() != DataType::kINT8 || v.ndim() != 2) {
    return invalid_argument("int8 weight values must be a 2-d int8 tensor, got " +
                            (v.is_empty() ? std::string("nothing") : v.describe()));
  }
  if (weight.group_size <= 0) {
    return invalid_argument("int8 weight " + v.describe() + " has group size " +
                            std::to_string(weight.group_size));
  }
  if (v.numel() % weight.group_size != 0) {
    return invalid_argument("int8 weight " + v.describe() + " has " + std::to_string(v.numel()) +
                            " elements, not a multiple of its group size " +
                            std::to_string(weight.group_size));
  }
  const Tensor& s = weight.scales;
  if (s.is_empty() || s.dtype() != DataType::kFP32 || s.numel() != v.numel() / weight.group_size ||
      s.device() != v.device()) {
    return invalid_argument("int8 weight " + v.describe() + " with group size " +
                            std::to_string(weight.group_size) + " needs " +
                            std::to_string(v.numel() / weight.group_size) + " fp32 scales on " +
                            std::string(device_name(v.device())) + ", got " +
                            (s.is_empty() ? std::string("none") : s.describe()));
  }
  return ok_status();
}

}  // namespace kuiper::op
