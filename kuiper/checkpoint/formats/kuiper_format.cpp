#include "kuiper/checkpoint/formats/kuiper_format.h"

#include <cstring>
#include <map>

#include "kuiper/checkpoint/formats/formats.h"
#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/checkpoint/formats/kuiper_matrix_storage.h"
#include "kuiper/checkpoint/formats/kuiper_metadata.h"
#include "kuiper/checkpoint/formats/safetensors.h"
#include "kuiper/op/int4_weight.h"
#include "kuiper/op/int8_weight.h"

namespace kuiper {
namespace {

bool detect_kuiper(const std::shared_ptr<MappedFile>& file) {
  uint64_t header_bytes = 0;
  if (file->size() < sizeof(header_bytes)) return false;
  std::memcpy(&header_bytes, file->data(), sizeof(header_bytes));
  if (header_bytes > kMaxSafetensorsHeaderBytes || header_bytes > file->size() - sizeof(header_bytes)) return false;
  const char* text = reinterpret_cast<const char*>(file->data()) + sizeof(header_bytes);
  return header_bytes > 0 && text[0] == '{' && declares_kuiper_format(text, header_bytes);
}

// The tensor `name` with exactly `dtype` and `shape`.
StatusOr<Tensor> expect_tensor(const SafetensorsFile& file, const std::string& name, DataType dtype,
                               const Shape& shape) {
  KUIPER_ASSIGN_OR_RETURN(Tensor t, file.tensor(name));
  if (t.dtype() != dtype || t.shape() != shape) {
    return invalid_format(file.path() + ": tensor " + name + " is " + t.describe() + ", expected " +
                          std::string(dtype_name(dtype)) + shape_to_string(shape));
  }
  return t;
}

// Tensors a matrix stored as `f` has in the file: values, then scales and mins where it has them.
size_t tensors_per_matrix(const WeightFormat& f) {
  if (f.dtype == DataType::kINT4) return f.int4_scheme == Int4Scheme::kWithMin ? 3 : 2;
  return f.dtype == DataType::kINT8 ? 2 : 1;
}

StatusOr<op::Weight> read_matrix(const SafetensorsFile& file, const MatrixSpec& spec, const WeightFormat& f) {
  op::Weight w;
  const bool int4 = f.dtype == DataType::kINT4;
  if (int4 && spec.cols % 2 != 0) {
    return invalid_format(file.path() + ": " + spec.name + " has an odd number of columns, which int4 cannot pack");
  }
  KUIPER_ASSIGN_OR_RETURN(w.values, expect_tensor(file, spec.name + ".weight", f.dtype,
                                                  {spec.rows, int4 ? spec.cols / 2 : spec.cols}));
  if (f.dtype != DataType::kINT8 && !int4) return w;
  w.group_size = f.group_size;
  if (spec.rows * spec.cols % f.group_size != 0) {
    return invalid_format(file.path() + ": " + spec.name + " is not a whole number of groups of " +
                          std::to_string(f.group_size));
  }
  const Shape groups{spec.rows * spec.cols / f.group_size};
  KUIPER_ASSIGN_OR_RETURN(w.scales, expect_tensor(file, spec.name + ".scales", DataType::kFP32, groups));
  if (!int4) {
    KUIPER_RETURN_IF_ERROR(op::check_int8_weight(w));
    return w;
  }
  if (f.int4_scheme == Int4Scheme::kWithMin) {
    KUIPER_ASSIGN_OR_RETURN(w.mins, expect_tensor(file, spec.name + ".mins", DataType::kFP32, groups));
  }
  KUIPER_RETURN_IF_ERROR(op::check_int4_weight(w));
  return w;
}

StatusOr<Checkpoint> load_kuiper(std::shared_ptr<MappedFile> mapped) {
  KUIPER_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(mapped->path()));
  KUIPER_ASSIGN_OR_RETURN(KuiperHeader h, parse_kuiper_metadata(file.metadata(), file.path()));
  KUIPER_ASSIGN_OR_RETURN(auto own_storage, matrix_storage(file.metadata(), h, file.path()));
  Checkpoint ckpt{h.config, {}, "kuiper v" + std::to_string(h.version) + " (" +
                                    weight_format_name(h.weights) + ")", file.path(), {}};
  LlamaWeights& w = ckpt.weights;
  w.layers.resize(h.config.n_layers);
  const std::vector<MatrixSpec> specs = matrix_specs(h.config);
  const std::vector<NamedMatrix> slots = named_matrices(w, h.config.shared_classifier);
  size_t expected_tensors = named_norms(w, h.config).size();
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto own = own_storage.find(specs[i].name);
    const WeightFormat& storage = own != own_storage.end() ? own->second : h.weights;
    KUIPER_ASSIGN_OR_RETURN(*slots[i].weight, read_matrix(file, specs[i], storage));
    expected_tensors += tensors_per_matrix(storage);
  }
  if (h.config.shared_classifier) w.classifier = w.token_embedding;
  for (const NamedVector& norm : named_norms(w, h.config)) {
    KUIPER_ASSIGN_OR_RETURN(*norm.tensor, expect_tensor(file, norm.name + ".weight", DataType::kFP32, {norm.length}));
  }
  if (file.names().size() != expected_tensors) {
    return invalid_format(file.path() + ": holds " + std::to_string(file.names().size()) +
                          " tensors, a kuiper checkpoint of " + h.config.summary() + " has " +
                          std::to_string(expected_tensors));
  }
  return ckpt;
}

WeightFormat storage_of(const op::Weight& w) {
  return {w.dtype(), w.is_quantized() ? w.group_size : 0,
          w.mins.is_empty() ? Int4Scheme::kSymmetric : Int4Scheme::kWithMin};
}

bool same_storage(const WeightFormat& a, const WeightFormat& b) {
  return a.dtype == b.dtype && a.group_size == b.group_size &&
         (a.dtype != DataType::kINT4 || a.int4_scheme == b.int4_scheme);
}

// The storage the file names as its own (the layers' matrices', read from the first layer's wq,
// which is what a model reports as its weight dtype) and the matrices stored otherwise.
struct FileStorage {
  WeightFormat weights;
  std::map<std::string, WeightFormat> exceptions;
};

StatusOr<FileStorage> file_storage(Checkpoint& ckpt) {
  FileStorage out{storage_of(ckpt.weights.layers.front().wq), {}};
  for (const NamedMatrix& m : named_matrices(ckpt.weights, ckpt.config.shared_classifier)) {
    const WeightFormat f = storage_of(*m.weight);
    if (f.dtype == DataType::kINT8) KUIPER_RETURN_IF_ERROR(op::check_int8_weight(*m.weight));
    if (f.dtype == DataType::kINT4) KUIPER_RETURN_IF_ERROR(op::check_int4_weight(*m.weight));
    if (!same_storage(f, out.weights)) out.exceptions[m.name] = f;
  }
  return out;
}

}  // namespace

const CheckpointFormat& kuiper_format() {
  static const CheckpointFormat format{kKuiperFormatName, detect_kuiper, load_kuiper};
  return format;
}

Status save_kuiper(const Checkpoint& checkpoint, const std::string& path) {
  KUIPER_RETURN_IF_ERROR(checkpoint.config.validate());
  Checkpoint ckpt = checkpoint;  // views only; the name lists need a mutable one
  KUIPER_ASSIGN_OR_RETURN(FileStorage storage, file_storage(ckpt));
  SafetensorsWriter writer;
  Metadata metadata = kuiper_metadata(ckpt.config, storage.weights);
  add_matrix_storage(metadata, storage.exceptions);
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  for (const NamedMatrix& m : named_matrices(ckpt.weights, ckpt.config.shared_classifier)) {
    KUIPER_RETURN_IF_ERROR(writer.add(m.name + ".weight", m.weight->values));
    if (m.weight->is_quantized()) KUIPER_RETURN_IF_ERROR(writer.add(m.name + ".scales", m.weight->scales));
    if (!m.weight->mins.is_empty()) KUIPER_RETURN_IF_ERROR(writer.add(m.name + ".mins", m.weight->mins));
  }
  for (const NamedVector& norm : named_norms(ckpt.weights, ckpt.config)) {
    if (norm.tensor->dtype() != DataType::kFP32) {
      return invalid_argument("kuiper files keep norms in fp32, " + norm.name + " is " + norm.tensor->describe());
    }
    KUIPER_RETURN_IF_ERROR(writer.add(norm.name + ".weight", *norm.tensor));
  }
  return writer.write(path);
}

}  // namespace kuiper
