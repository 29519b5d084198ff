// The CPU kernel table: every CPU kernel is named here and nowhere else.
#include "kuiper/op/kernels/cpu/cpu_kernels.h"
#include "kuiper/op/kernels/cpu/cpu_threads.h"
#include "kuiper/op/kernels/cpu/int4_cpu_kernels.h"
#include "kuiper/op/kernels/cpu/int8_cpu_kernels.h"

namespace kuiper::op {
namespace {

KernelTable make_cpu_table() {
  cpu::use_single_threaded_blas();
  KernelTable t;
  const auto at = [](DataType d) { return static_cast<int>(d); };
  t.embedding[at(DataType::kFP32)] = cpu::embedding_fp32;
  t.embedding[at(DataType::kFP16)] = cpu::embedding_half;
  t.embedding[at(DataType::kBF16)] = cpu::embedding_half;
  t.embedding[at(DataType::kINT8)] = cpu::embedding_int8;
  t.embedding[at(DataType::kINT4)] = cpu::embedding_int4;
  t.matmul[at(DataType::kFP32)] = cpu::matmul_fp32;
  t.matmul[at(DataType::kFP16)] = cpu::matmul_half;
  t.matmul[at(DataType::kBF16)] = cpu::matmul_half;
  t.matmul[at(DataType::kINT8)] = cpu::matmul_int8;
  t.matmul[at(DataType::kINT4)] = cpu::matmul_int4;
  t.rmsnorm = cpu::rmsnorm;
  t.add_rmsnorm = cpu::add_rmsnorm;
  t.rope = cpu::rope;
  t.kv_store[at(DataType::kFP32)] = cpu::kv_store_fp32;
  t.attention[at(DataType::kFP32)] = cpu::attention_fp32;
  t.paged_attention[at(DataType::kFP32)] = cpu::paged_attention_fp32;
  t.swiglu = cpu::swiglu;
  t.add = cpu::add;
  t.add_bias = cpu::add_bias;
  t.argmax = cpu::argmax;
  return t;
}

}  // namespace

const KernelTable& cpu_kernel_table() {
  static const KernelTable table = make_cpu_table();
  return table;
}

namespace cpu {

Status expect_cpu(const Tensor& t, DataType dtype, const char* what) {
  if (t.is_empty()) return invalid_argument(std::string(what) + " is empty");
  if (t.device() != DeviceType::kCPU) {
    return invalid_argument(std::string(what) + " must be on the cpu, got " + t.describe());
  }
  if (t.dtype() != dtype) {
    return invalid_argument(std::string(what) + " must be " + std::string(dtype_name(dtype)) +
                            ", got " + t.describe());
  }
  return ok_status();
}

}  // namespace cpu
}  // namespace kuiper::op
