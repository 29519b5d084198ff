#include <cstring>

#include "kuiper/base/half.h"
#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper::op::cpu {

Status check_embedding(const Tensor& tokens, const Weight& table, const Tensor& out) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(tokens, DataType::kINT32, "embedding tokens"));
  KUIPER_RETURN_IF_ERROR(expect_cpu(out, DataType::kFP32, "embedding output"));
  if (table.values.ndim() != 2 || out.numel() != tokens.numel() * table.cols()) {
    return invalid_argument("embedding shapes do not fit: tokens " + tokens.describe() +
                            ", table " + table.values.describe() + ", output " + out.describe());
  }
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t t = 0; t < tokens.numel(); ++t) {
    if (ids[t] < 0 || ids[t] >= table.rows()) {
      return out_of_range("token id " + std::to_string(ids[t]) + " outside vocabulary of " +
                          std::to_string(table.rows()));
    }
  }
  return ok_status();
}

Status embedding_fp32(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&) {
  KUIPER_RETURN_IF_ERROR(expect_cpu(table.values, DataType::kFP32, "embedding table"));
  KUIPER_RETURN_IF_ERROR(check_embedding(tokens, table, out));
  const int64_t dim = table.cols();
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t t = 0; t < tokens.numel(); ++t) {
    std::memcpy(out.data<float>() + t * dim, table.values.data<float>() + ids[t] * dim,
                dim * sizeof(float));
  }
  return ok_status();
}

Status embedding_half(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext&) {
  const bool bf16 = table.dtype() == DataType::kBF16;
  KUIPER_RETURN_IF_ERROR(expect_cpu(table.values, bf16 ? DataType::kBF16 : DataType::kFP16,
                                    "embedding table"));
  KUIPER_RETURN_IF_ERROR(check_embedding(tokens, table, out));
  const int64_t dim = table.cols();
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t t = 0; t < tokens.numel(); ++t) {
    const uint16_t* row = table.values.data<uint16_t>() + ids[t] * dim;
    float* dst = out.data<float>() + t * dim;
    for (int64_t i = 0; i < dim; ++i) dst[i] = bf16 ? bf16_to_float(row[i]) : fp16_to_float(row[i]);
  }
  return ok_status();
}

}  // namespace kuiper::op::cpu
