#include "kuiper/checkpoint/check_tensors.h"

#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/model/finite_values.h"
#include "kuiper/model/float_convert.h"

namespace kuiper {
namespace {

Status check_finite(const Tensor& tensor, const std::string& name, const std::string& path) {
  if (tensor.is_empty()) return ok_status();
  KUIPER_ASSIGN_OR_RETURN(const Tensor values, place_fp32(tensor, cpu_allocator()));
  return check_all_finite(values.data<float>(), values.numel(), path + ": tensor " + name);
}

Status check_finite_tensors(const Checkpoint& checkpoint, bool matrix_values) {
  LlamaWeights weights = checkpoint.weights;  // shares the tensors; the walk needs them mutable
  for (const NamedVector& v : named_norms(weights, checkpoint.config)) {
    KUIPER_RETURN_IF_ERROR(check_finite(*v.tensor, v.name, checkpoint.path));
  }
  for (const NamedMatrix& m : named_matrices(weights, checkpoint.config.shared_classifier)) {
    const op::Weight& w = *m.weight;
    if (w.is_quantized()) {
      KUIPER_RETURN_IF_ERROR(check_finite(w.scales, m.name + " scales", checkpoint.path));
      KUIPER_RETURN_IF_ERROR(check_finite(w.mins, m.name + " minimums", checkpoint.path));
    } else if (matrix_values) {
      KUIPER_RETURN_IF_ERROR(check_finite(w.values, m.name, checkpoint.path));
    }
  }
  return ok_status();
}

}  // namespace

Status check_small_tensors_finite(const Checkpoint& checkpoint) {
  return check_finite_tensors(checkpoint, /*matrix_values=*/false);
}

Status check_tensors_finite(const Checkpoint& checkpoint) {
  return check_finite_tensors(checkpoint, /*matrix_values=*/true);
}

}  // namespace kuiper
