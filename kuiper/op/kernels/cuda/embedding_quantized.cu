// out[t, :] = dequant(table[tokens[t], :]) for int8 and int4 tables. Token ids are read on the
// device; an id outside the table yields a zero row, as for the float tables (embedding_cuda.cu).
#include <cuda_fp16.h>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/int8_weight.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/int4_cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/int8_cuda_kernels.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kThreads = 256;

// Flat weight i of an int8 table.
struct Int8Values {
  const int8_t* q;
  const __half* scales;
  int group_size;
  __device__ float operator()(int64_t i) const { return static_cast<float>(q[i]) * __half2float(scales[i / group_size]); }
};

// Flat weight i of an int4 table.
struct Int4Values {
  const uint8_t* packed;
  const __half* scales;
  const __half* mins;  // null: symmetric
  int group_size;
  __device__ float operator()(int64_t i) const {
    const int64_t g = i / group_size;
    return int4_value(int4_nibble(packed, i), __half2float(scales[g]), mins ? __half2float(mins[g]) : 0.f,
                      mins != nullptr);
  }
};

template <typename Values>
__global__ void embedding_quantized_kernel(const int32_t* tokens, Values values, int64_t vocab, int64_t dim, float* out) {
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  const bool valid = id >= 0 && id < vocab;
  const int64_t start = (valid ? id : 0) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = valid ? values(start + i) : 0.f;
}

template <typename Values>
Status embed(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx, const Values& values) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(tokens, DataType::kINT32, "embedding tokens"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "embedding output"));
  if (out.numel() != tokens.numel() * table.cols()) {
    return invalid_argument("embedding shapes do not fit: tokens " + tokens.describe() +
                            ", table " + table.values.describe() + ", output " + out.describe());
  }
  if (tokens.numel() == 0) return ok_status();
  embedding_quantized_kernel<<<static_cast<unsigned>(tokens.numel()), kThreads, 0, as_cuda_stream(ctx.stream())>>>(
      tokens.data<int32_t>(), values, table.rows(), table.cols(), out.data<float>());
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("embedding of a quantized table");
  return ok_status();
}

}  // namespace

Status embedding_int8(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_int8_weight(table));
  KUIPER_RETURN_IF_ERROR(expect_cuda(table.values, DataType::kINT8, "embedding table"));
  return embed(tokens, table, out, ctx, Int8Values{table.values.data<int8_t>(), table.scales.data<__half>(), table.group_size});
}

Status embedding_int4(const Tensor& tokens, const Weight& table, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_int4_weight(table));
  KUIPER_RETURN_IF_ERROR(expect_cuda(table.values, DataType::kINT4, "embedding table"));
  return embed(tokens, table, out, ctx,
               Int4Values{table.values.data<uint8_t>(), table.scales.data<__half>(),
                          table.mins.is_empty() ? nullptr : table.mins.data<__half>(), table.group_size});
}

}  // namespace kuiper::op::cuda
