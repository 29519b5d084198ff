// GGUF, llama.cpp's model container (versions 2 and 3). Layout of a file, all little-endian:
//
//   "GGUF" | u32 version | u64 tensor_count | u64 metadata_count
//   metadata_count × (string key | u32 value_type | value)
//   tensor_count × (string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset)
//   padding to general.alignment (default 32) | data section
//
// A string is u64 length + bytes; an array value is u32 element type + u64 count + elements.
// dims[0] is the fastest-varying dimension (a matrix [rows, cols] is stored as dims {cols, rows}).
// Tensor offsets are relative to the data section and multiples of the alignment.
//
// The header is untrusted: open() bounds every count, length, nesting depth, offset and size
// against the file before anything is handed out, and refuses duplicate keys and tensors and
// overlapping tensor data, each with one line naming the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/mapped_file.h"
#include "kuiper/base/status.h"

namespace kuiper {

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// The ggml tensor types kuiper reads (the file may name others; see ggml_type_name).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11,
  kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20, kIQ4_XS = 23, kBF16 = 30,
};

// Q8_0: blocks of 32 int8 weights preceded by their fp16 scale.
inline constexpr int kQ8_0BlockWeights = 32;
inline constexpr size_t kQ8_0BlockBytes = 2 + kQ8_0BlockWeights;

inline constexpr uint32_t kGgufDefaultAlignment = 32;

// "Q4_K" for ggml type id 12; nullptr for an id ggml does not define.
const char* ggml_type_name(uint32_t type);

// Whether `path` is a regular file starting with GGUF's magic (a model that carries its own
// tokenizer and chat template); false when it cannot be read.
bool is_gguf_file(const std::string& path);

// One metadata value. Scalars are widened into the field of their kind; strings point into
// the mapping. Arrays of numbers keep a pointer to their elements; arrays of strings are
// split into `strings`; arrays of arrays are checked but not exposed.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t as_uint = 0;  // unsigned integers and bool
  int64_t as_int = 0;    // signed integers
  double as_float = 0;   // float32, float64
  std::string_view as_string;
  GgufType element_type = GgufType::kUint8;  // arrays
  uint64_t count = 0;                        // arrays
  const uint8_t* elements = nullptr;         // arrays of numbers or bools
  std::vector<std::string_view> strings;     // arrays of strings
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] fastest, as in the file
  uint32_t type = 0;          // ggml type id
  size_t offset = 0;          // from the start of the file
  size_t nbytes = 0;
};

class GgufFile {
 public:
  // Maps and validates `file`; the error names the file and the field at fault.
  static StatusOr<GgufFile> open(std::shared_ptr<MappedFile> file);
  // Whether the file starts with GGUF's magic (cheap, for format detection).
  static bool has_magic(const MappedFile& file);

  const std::string& path() const { return file_->path(); }
  const std::shared_ptr<MappedFile>& file() const { return file_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }

  // Metadata, by key. Typed getters fail naming the key when it is absent or of another type;
  // integer getters accept any integer type whose value fits.
  const GgufValue* find(const std::string& key) const;
  StatusOr<std::string_view> get_string(const std::string& key) const;
  StatusOr<uint64_t> get_uint(const std::string& key) const;
  StatusOr<double> get_float(const std::string& key) const;  // float32/float64
  StatusOr<bool> get_bool(const std::string& key) const;
  StatusOr<std::vector<std::string_view>> get_strings(const std::string& key) const;
  StatusOr<std::vector<float>> get_floats(const std::string& key) const;   // float32 arrays
  StatusOr<std::vector<int64_t>> get_ints(const std::string& key) const;  // integer arrays
  // Every key with its value, in key order.
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }

  // Tensors in file order, and by name (null when absent).
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  Status parse();

  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace kuiper
