#include "kuiper/model/quantize_common.h"


#include "kuiper/model/finite_values.h"
#include "kuiper/model/float_convert.h"

namespace kuiper {

StatusOr<Tensor> quantization_source(const Tensor& values, int group_size) {
  if (values.is_empty() || values.ndim() != 2) {
    return invalid_argument("only 2-d weights are quantized, got " +
                            (values.is_empty() ? std::string("nothing") : values.describe()));
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor src, place_fp32(values, cpu_allocator()));
  if (group_size <= 0 || src.numel() % group_size != 0) {
    return invalid_argument("cannot quantize " + values.describe() + " in groups of " +
                            std::to_string(group_size) + ": its " + std::to_string(src.numel()) +
                            " elements are not a whole number of groups");
  }
  // A NaN or Inf would become an integer, which is undefined behaviour.
  if (const int64_t bad = first_non_finite(src.data<float>(), src.numel()); bad >= 0) {
    return invalid_argument("cannot quantize " + values.describe() + ": weight [" + std::to_string(bad / src.dim(1)) +
                            ", " + std::to_string(bad % src.dim(1)) + "], element " + std::to_string(bad) + " is " +
                            non_finite_name(src.data<float>()[bad]));
  }
  return src;
}

}  // namespace kuiper
