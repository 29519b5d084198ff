#include "kuiper/checkpoint/check_tensors.h"

#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/model/finite_values.h"
#include "kuiper/model/float_convert.h"

namespace kuiper {
namespace {

Status check_finite(const Tensor& tensor, const std::string& name, const std::string& path) {
  KUIPER_ASSIGN_OR_RETURN(const Tensor values, place_fp32(tensor, cpu_allocator()));
  const int64_t bad = first_non_finite(values.data<float>(), values.numel());
  if (bad < 0) return ok_status();
  return invalid_format(path + ": tensor " + name + " holds " + non_finite_name(values.data<float>()[bad]) +
                        " at element " + std::to_string(bad));
}

}  // namespace

Status check_tensors_finite(const Checkpoint& checkpoint) {
  LlamaWeights weights = checkpoint.weights;  // shares the tensors; the walk needs them mutable
  for (const NamedMatrix& m : named_matrices(weights, checkpoint.config.shared_classifier)) {
    // int8 values are finite by construction; their scales are floats.
    const bool quantized = m.weight->is_quantized();
    KUIPER_RETURN_IF_ERROR(check_finite(quantized ? m.weight->scales : m.weight->values,
                                        quantized ? m.name + " scales" : m.name, checkpoint.path));
  }
  for (const NamedVector& v : named_norms(weights, checkpoint.config)) {
    KUIPER_RETURN_IF_ERROR(check_finite(*v.tensor, v.name, checkpoint.path));
  }
  return ok_status();
}

}  // namespace kuiper
