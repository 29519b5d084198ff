// Writes a GGUF v3 file (layout in gguf_file.h): metadata in the order added, then tensor
// infos, then the data section with every tensor 32-byte aligned. Tensor bytes are produced
// one tensor at a time while writing, so a model is never held twice in memory. Written as
// OUT.partial and renamed when complete.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "kuiper/checkpoint/formats/gguf_file.h"

namespace kuiper {

class GgufWriter {
 public:
  void add_string(const std::string& key, std::string_view value);
  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_strings(const std::string& key, const std::vector<std::string_view>& values);
  void add_floats(const std::string& key, const std::vector<float>& values);
  void add_int32s(const std::string& key, const std::vector<int32_t>& values);
  // A copy of a value read from another file; arrays of arrays are refused.
  Status add_value(const std::string& key, const GgufValue& value);

  bool has_key(const std::string& key) const { return keys_.count(key) > 0; }

  // Tensor `name` of ggml `type` and shape `shape` (outermost first, e.g. {rows, cols}); `bytes`
  // is called at write() and must return exactly `nbytes` bytes.
  using TensorBytes = std::function<StatusOr<std::string>()>;
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape, size_t nbytes,
                  TensorBytes bytes);

  // Fails on a key or tensor name added twice.
  Status write(const std::string& path) const;

 private:
  void add_entry(const std::string& key, GgufType type, std::string payload);

  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    size_t nbytes;
    TensorBytes bytes;
  };
  std::string metadata_;  // serialized key-value pairs
  size_t metadata_count_ = 0;
  std::set<std::string> keys_;
  std::vector<std::string> duplicates_;
  std::vector<Tensor> tensors_;
};

}  // namespace kuiper
