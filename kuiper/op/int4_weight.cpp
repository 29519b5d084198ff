#include "kuiper/op/int4_weight.h"

namespace kuiper::op {

Status check_int4_weight(const Weight& weight) {
  const Tensor& v = weight.values;
  if (v.is_empty() || v.dtype() != DataType::kINT4 || v.ndim() != 2) {
    return invalid_argument("int4 weight values must be a 2-d int4 tensor, got " +
                            (v.is_empty() ? std::string("nothing") : v.describe()));
  }
  if (weight.group_size % 2 != 0) {
    return invalid_argument("int4 weight " + v.describe() + " has odd group size " +
                            std::to_string(weight.group_size) + " (groups are whole bytes)");
  }
  KUIPER_RETURN_IF_ERROR(check_group_tensor(weight, weight.scales, "int4", "scales"));
  if (!weight.mins.is_empty()) KUIPER_RETURN_IF_ERROR(check_group_tensor(weight, weight.mins, "int4", "mins"));
  return ok_status();
}

}  // namespace kuiper::op
