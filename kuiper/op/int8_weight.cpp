#include "kuiper/op/int8_weight.h"

namespace kuiper::op {

Status check_int8_weight(const Weight& weight) {
  const Tensor& v = weight.values;
  if (v.is_empty() || v.dtype() != DataType::kINT8 || v.ndim() != 2) {
    return invalid_argument("int8 weight values must be a 2-d int8 tensor, got " +
                            (v.is_empty() ? std::string("nothing") : v.describe()));
  }
  return check_group_tensor(weight, weight.scales, "int8", "scales");
}

}  // namespace kuiper::op
