// Re-storing every matrix of a checkpoint in another representation — a float dtype, or int8
// or int4 in groups — with per-matrix progress. Norms stay fp32. Used by the export tool and by
// programs that quantize at load with a chosen group size.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "kuiper/checkpoint/checkpoint.h"
#include "kuiper/model/calibration_inputs.h"
#include "kuiper/model/int4_quantize.h"

namespace kuiper {

struct WeightFormat {
  DataType dtype = DataType::kFP32;  // fp32, fp16, bf16, int8 or int4
  int group_size = 64;               // int8/int4 only
  Int4Scheme int4_scheme = kDefaultInt4Scheme;  // int4 only
};

// Reported after each matrix is converted.
struct MatrixProgress {
  const std::string& name;  // e.g. "layers.3.wq"
  int index, count;         // 1-based position among `count` matrices
  double max_error;         // largest |original − stored| of this matrix (0 for widening)
};

using ProgressFn = std::function<void(const MatrixProgress&)>;

struct ConvertOptions {
  // The token embedding and a separate classifier in this format instead of the layers' (kuiper's
  // int4 files keep them int8, as llama.cpp's 4-bit presets keep the output matrix at 6-8 bits).
  std::optional<WeightFormat> embedding;
  // int4 only: the layers' matrices (and a separate classifier) quantized by GPTQ against these
  // inputs of the original model, instead of each group on its own (collected as needed).
  CalibrationInputs* calibration = nullptr;
};

// A host checkpoint whose matrices (token embedding included) are all in `format`, but for what
// `options` says. Matrices already in their format are shared, not copied; quantized ones in
// another dtype, group size or scheme are requantized from their dequantized values.
StatusOr<Checkpoint> convert_checkpoint(const Checkpoint& checkpoint, const WeightFormat& format,
                                        const ProgressFn& progress = nullptr, const ConvertOptions& options = {});

// "int8 (groups of 64)", "int4 with minimum (groups of 32)" or "bf16".
std::string weight_format_name(const WeightFormat& format);

}  // namespace kuiper
