#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/int8_cpu_kernels.h"

namespace kuiper::op::cpu {

Status embedding_int8(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(table));
  KUIPER_RETURN_IF_ERROR(expect_cpu(table.values, DataType::kINT8, "embedding table"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(tokens, DataType::kINT32, "embedding tokens"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "embedding output"));
  const int64_t dim = table.cols();
  if (out.numel() != tokens.numel() * dim) {
    return invalid_argument("embedding shapes do not fit: tokens " + tokens.describe() +
                            ", table " + table.values.describe() + ", output " + out.describe());
  }
  const int32_t* ids = tokens.data<int32_t>();
  const int8_t* q = table.values.data<int8_t>();
  const float* scales = table.scales.data<float>();
  for (int64_t t = 0; t < tokens.numel(); ++t) {
    if (ids[t] < 0 || ids[t] >= table.rows()) {
      return out_of_range("token id " + std::to_string(ids[t]) + " outside vocabulary of " +
                          std::to_string(table.rows()));
    }
    const int64_t start = int64_t{ids[t]} * dim;
    float* dst = out.data<float>() + t * dim;
    for (int64_t i = 0; i < dim; ++i) {
      dst[i] = static_cast<float>(q[start + i]) * scales[int8_group_of(start + i, table.group_size)];
    }
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
