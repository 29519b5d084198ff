#include "kuiper/checkpoint/checkpoint_convert.h"

#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/model/int4_gptq.h"
#include "kuiper/model/int8_quantize.h"
#include "kuiper/model/dequantize.h"
#include "kuiper/model/float_convert.h"
#include "kuiper/model/weight_convert.h"

namespace kuiper {
namespace {

bool is_quantized(DataType d) { return d == DataType::kINT8 || d == DataType::kINT4; }

bool already_in(const op::Weight& w, const WeightFormat& f) {
  if (w.dtype() != f.dtype) return false;
  if (!is_quantized(f.dtype)) return true;
  const bool with_min = f.int4_scheme == Int4Scheme::kWithMin;
  return w.group_size == f.group_size && (f.dtype != DataType::kINT4 || w.mins.is_empty() != with_min);
}

// The fp32 values a weight stands for.
StatusOr<Tensor> as_fp32(const op::Weight& w) {
  if (w.is_quantized()) return dequantize_weight(w);
  return place_fp32(w.values, cpu_allocator());
}

// `w` in `format` (by GPTQ against `inputs` when int4 and given) and, when `measure`, the
// largest error that introduced (else 0: measuring costs a pass over the matrix).
StatusOr<std::pair<op::Weight, double>> convert_matrix(const op::Weight& w, const WeightFormat& f,
                                                       const InputGram* inputs, bool measure) {
  KUIPER_ASSIGN_OR_RETURN(Tensor original, as_fp32(w));
  op::Weight converted;
  if (f.dtype == DataType::kINT8) {
    KUIPER_ASSIGN_OR_RETURN(converted, quantize_int8(original, f.group_size));
  } else if (f.dtype == DataType::kINT4 && inputs != nullptr) {
    KUIPER_ASSIGN_OR_RETURN(converted, quantize_int4_gptq(original, *inputs, f.group_size, f.int4_scheme));
  } else if (f.dtype == DataType::kINT4) {
    KUIPER_ASSIGN_OR_RETURN(converted, quantize_int4(original, f.group_size, f.int4_scheme));
  } else {
    KUIPER_ASSIGN_OR_RETURN(converted, convert_weight(op::Weight{original, Tensor(), 0}, f.dtype, cpu_allocator()));
  }
  if (!measure) return std::pair{std::move(converted), 0.0};
  KUIPER_ASSIGN_OR_RETURN(Tensor stored, as_fp32(converted));
  KUIPER_ASSIGN_OR_RETURN(const double error, max_abs_difference(original, stored));
  return std::pair{std::move(converted), error};
}

Status check_format(const WeightFormat& format) {
  const DataType d = format.dtype;
  if (d != DataType::kFP32 && d != DataType::kFP16 && d != DataType::kBF16 && !is_quantized(d)) {
    return invalid_argument("weights can be stored as fp32, fp16, bf16, int8 or int4, not " + std::string(dtype_name(d)));
  }
  if (is_quantized(d) && format.group_size <= 0) {
    return invalid_argument(std::string(dtype_name(d)) + " group size must be positive, got " +
                            std::to_string(format.group_size));
  }
  return ok_status();
}

bool is_embedding(const std::string& name) { return name == "token_embedding" || name == "classifier"; }

}  // namespace

std::string weight_format_name(const WeightFormat& format) {
  std::string name(dtype_name(format.dtype));
  if (format.dtype == DataType::kINT4 && format.int4_scheme == Int4Scheme::kWithMin) name += " with minimum";
  if (is_quantized(format.dtype)) name += " (groups of " + std::to_string(format.group_size) + ")";
  return name;
}

StatusOr<Checkpoint> convert_checkpoint(const Checkpoint& checkpoint, const WeightFormat& format,
                                        const ProgressFn& progress, const ConvertOptions& options) {
  KUIPER_RETURN_IF_ERROR(check_format(format));
  if (options.embedding) KUIPER_RETURN_IF_ERROR(check_format(*options.embedding));
  Checkpoint out = checkpoint;
  const bool shared = out.config.shared_classifier;
  auto matrices = named_matrices(out.weights, shared);
  for (size_t i = 0; i < matrices.size(); ++i) {
    op::Weight& w = *matrices[i].weight;
    const bool embedding = is_embedding(matrices[i].name) && options.embedding;
    const WeightFormat& target = embedding ? *options.embedding : format;
    const InputGram* inputs = nullptr;
    if (options.calibration && target.dtype == DataType::kINT4) {
      KUIPER_ASSIGN_OR_RETURN(inputs, options.calibration->for_matrix(matrices[i].name));
    }
    double error = 0;
    if (!already_in(w, target)) {
      auto converted = convert_matrix(w, target, inputs, progress != nullptr);
      if (!converted.ok()) {
        return Status(converted.status().code(), matrices[i].name + ": " + converted.status().message());
      }
      std::tie(w, error) = std::move(converted).value();
    }
    if (progress) progress({matrices[i].name, static_cast<int>(i) + 1, static_cast<int>(matrices.size()), error});
  }
  if (shared) out.weights.classifier = out.weights.token_embedding;
  for (const NamedVector& norm : named_norms(out.weights, out.config)) {
    KUIPER_ASSIGN_OR_RETURN(*norm.tensor, place_fp32(*norm.tensor, cpu_allocator()));
  }
  out.format = checkpoint.format + " as " + weight_format_name(format);
  if (options.embedding) out.format += ", embedding " + weight_format_name(*options.embedding);
  if (options.calibration) out.format += ", GPTQ on " + std::to_string(options.calibration->tokens()) + " tokens";
  return out;
}

}  // namespace kuiper
