// Safetensors, the tensor container Hugging Face stores weights in, and which kuiper's own
// formats build on. Layout of a file:
//
//   u64 little-endian N | N bytes of JSON header | data section
//
// The header maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin,
// end]} (byte offsets relative to the data section) and may hold "__metadata__", a string→string
// map. Tensors tile the data section exactly: sorted by offset, each begins where the previous
// ends, and the last ends at the end of the file (no holes, no overlaps, no trailing bytes).
//
// The reader treats the header as untrusted input and checks all of the above before handing
// out a tensor. The writer produces files the reference implementation reads.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/mapped_file.h"
#include "kuiper/base/status.h"
#include "kuiper/tensor/tensor.h"

namespace kuiper {

// Headers larger than this are refused: real ones are kilobytes to a few megabytes.
inline constexpr size_t kMaxSafetensorsHeaderBytes = 100u << 20;

// Safetensors dtype names of the types kuiper computes with: F32, F16, BF16, I8, I32, and U8 for
// packed int4.
std::optional<DataType> dtype_from_safetensors(std::string_view name);
std::string_view safetensors_dtype_name(DataType dtype);

// One tensor as the header describes it (after validation).
struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;  // as written in the file, e.g. "BF16" or "F64"
  Shape shape;
  size_t offset = 0;  // from the start of the file
  size_t nbytes = 0;
};

// A validated, memory-mapped safetensors file. Tensors it hands out share the mapping and keep
// it alive, so the SafetensorsFile itself may go away first.
class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header; the error names the file and the tensor at fault.
  static StatusOr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  // Tensor names in data-section order.
  const std::vector<std::string>& names() const { return names_; }
  // The entry for `name`, or null when the file has no such tensor.
  const SafetensorsEntry* find(const std::string& name) const;
  // "__metadata__" of the header (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor `name` on the host: a zero-copy view of the mapping when its offset is aligned for
  // its dtype, otherwise a copy. Fails (naming tensor and file) when it is absent or its dtype is
  // one kuiper does not compute with (e.g. F64).
  StatusOr<Tensor> tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;

  std::shared_ptr<MappedFile> file_;
  std::shared_ptr<Buffer> mapping_;  // borrows the mapping for tensor views
  std::map<std::string, SafetensorsEntry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors and metadata, then writes one safetensors file. The JSON header is padded with
// spaces so the data section starts 64-byte aligned, and tensors are laid out widest element
// first (4-byte, then 2-byte, then 1-byte types, each group in the order added), so every tensor
// starts aligned for its dtype although the format allows no padding between tensors.
class SafetensorsWriter {
 public:
  // Records `tensor` (any device; read at write()) under `name`. Refuses empty, duplicate and
  // reserved ("__metadata__") names.
  Status add(const std::string& name, const Tensor& tensor);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // Writes `path` + ".partial" and renames it to `path` once complete, so a failure never
  // leaves a half-written file under the final name.
  Status write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    Tensor tensor;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kuiper
