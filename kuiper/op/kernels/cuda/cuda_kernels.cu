// The CUDA kernel table: every CUDA kernel is named here and nowhere else. Kernels whose code
// depends on a storage type dispatch on it inside, so one function serves several entries.
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/int4_cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/int8_cuda_kernels.cuh"

namespace kuiper::op {
namespace {

KernelTable make_cuda_table() {
  KernelTable t;
  const auto at = [](DataType d) { return static_cast<int>(d); };
  for (DataType d : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    t.embedding[at(d)] = cuda::embedding;
    t.matmul[at(d)] = cuda::matmul;
    t.kv_store[at(d)] = cuda::kv_store;
    t.attention[at(d)] = cuda::attention;
    t.attention_quantized_output[at(d)] = cuda::attention_quantized_output;
    t.paged_attention[at(d)] = cuda::paged_attention;
  }
  for (DataType d : {DataType::kFP32, DataType::kFP16, DataType::kBF16, DataType::kINT8, DataType::kINT4}) {
    t.decode_gemv[at(d)] = cuda::decode_gemv;
  }
  t.decode_gemv_reads_quantized = cuda::decode_gemv_reads_quantized;
  t.decode_gemv_quantizes_output = cuda::decode_gemv_quantizes_output;
  t.matmul_input[at(DataType::kFP16)] = DataType::kFP16;
  t.matmul_input[at(DataType::kBF16)] = DataType::kBF16;
  t.embedding[at(DataType::kINT8)] = cuda::embedding_int8;
  t.matmul[at(DataType::kINT8)] = cuda::matmul_int8;
  t.embedding[at(DataType::kINT4)] = cuda::embedding_int4;
  t.matmul[at(DataType::kINT4)] = cuda::matmul_int4;
  t.rmsnorm = cuda::rmsnorm;
  t.add_rmsnorm = cuda::add_rmsnorm;
  t.rope = cuda::rope;
  t.rope_kv_store = cuda::rope_kv_store;
  t.swiglu = cuda::swiglu;
  t.swiglu_stacked = cuda::swiglu_stacked;
  t.add = cuda::add;
  t.add_bias = cuda::add_bias;
  t.argmax = cuda::argmax;
  return t;
}

}  // namespace

const KernelTable& cuda_kernel_table() {
  static const KernelTable table = make_cuda_table();
  return table;
}

namespace cuda {

Status expect_cuda(const Tensor& t, DataType dtype, const char* what) {
  if (t.is_empty()) return invalid_argument(std::string(what) + " is empty");
  if (t.device() != DeviceType::kCUDA) {
    return invalid_argument(std::string(what) + " must be on cuda, got " + t.describe());
  }
  if (t.dtype() != dtype) {
    return invalid_argument(std::string(what) + " must be " + std::string(dtype_name(dtype)) +
                            ", got " + t.describe());
  }
  return ok_status();
}

Status expect_cuda_float_type(const Tensor& t, const char* what) {
  if (t.is_empty()) return invalid_argument(std::string(what) + " is empty");
  if (t.device() != DeviceType::kCUDA) {
    return invalid_argument(std::string(what) + " must be on cuda, got " + t.describe());
  }
  const DataType d = t.dtype();
  if (d != DataType::kFP32 && d != DataType::kFP16 && d != DataType::kBF16) {
    return unsupported(std::string(what) + " must be fp32, fp16 or bf16 on cuda, got " +
                       t.describe());
  }
  return ok_status();
}

}  // namespace cuda
}  // namespace kuiper::op
