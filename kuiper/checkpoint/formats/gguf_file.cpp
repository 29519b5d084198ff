#include "kuiper/checkpoint/formats/gguf_file.h"

#include <algorithm>
#include <cstring>

namespace kuiper {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
// Arrays inside arrays are legal; real files nest none. Deeper ones are refused, so a crafted
// header cannot recurse without bound.
constexpr int kMaxArrayNesting = 4;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint32_t kMaxAlignment = 1u << 20;

struct TypeSize {
  const char* name;
  int64_t block_weights;  // weights per block
  size_t block_bytes;
};

// ggml's type table (ggml.c type_traits), by type id; ids it no longer defines are empty.
constexpr TypeSize kGgmlTypes[] = {
    {"F32", 1, 4},        {"F16", 1, 2},         {"Q4_0", 32, 18},     {"Q4_1", 32, 20},
    {nullptr, 0, 0},      {nullptr, 0, 0},       {"Q5_0", 32, 22},     {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},     {"Q8_1", 32, 36},      {"Q2_K", 256, 84},    {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},   {"Q5_K", 256, 176},    {"Q6_K", 256, 210},   {"Q8_K", 256, 292},
    {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74},   {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110},   {"IQ2_S", 256, 82},   {"IQ4_XS", 256, 136},
    {"I8", 1, 1},         {"I16", 1, 2},         {"I32", 1, 4},        {"I64", 1, 8},
    {"F64", 1, 8},        {"IQ1_M", 256, 56},    {"BF16", 1, 2},       {nullptr, 0, 0},
    {nullptr, 0, 0},      {nullptr, 0, 0},       {"TQ1_0", 256, 54},   {"TQ2_0", 256, 66},
    {nullptr, 0, 0},      {nullptr, 0, 0},       {nullptr, 0, 0},      {"MXFP4", 32, 17},
};

const TypeSize* ggml_type(uint32_t type) {
  if (type >= std::size(kGgmlTypes) || kGgmlTypes[type].name == nullptr) return nullptr;
  return &kGgmlTypes[type];
}

// Bytes of one element of a scalar metadata type; 0 for strings and arrays, nullopt for none.
std::optional<size_t> scalar_bytes(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return std::nullopt;
}

const char* value_type_name(GgufType type) {
  static constexpr const char* kNames[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                           "bool",  "string", "array", "uint64", "int64",  "float64"};
  return kNames[static_cast<uint32_t>(type)];
}

// Sequential little-endian reads of the header, each bounded by the file size.
class HeaderReader {
 public:
  HeaderReader(const MappedFile& file) : file_(file) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return file_.size() - offset_; }
  const uint8_t* here() const { return file_.data() + offset_; }

  Status fail(const std::string& what) const { return invalid_format(file_.path() + ": " + what); }

  template <typename T>
  StatusOr<T> read(const std::string& what) {
    if (remaining() < sizeof(T)) {
      return fail("truncated at offset " + std::to_string(offset_) + " while reading " + what);
    }
    T value;
    std::memcpy(&value, here(), sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  Status skip(uint64_t bytes, const std::string& what) {
    if (bytes > remaining()) {
      return fail(what + " needs " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset_) +
                  ", past the end of the file (" + std::to_string(remaining()) + " bytes left)");
    }
    offset_ += bytes;
    return ok_status();
  }

  StatusOr<std::string_view> read_string(const std::string& what) {
    KUIPER_ASSIGN_OR_RETURN(uint64_t length, read<uint64_t>("the length of " + what));
    const char* text = reinterpret_cast<const char*>(here());
    KUIPER_RETURN_IF_ERROR(skip(length, what + " (length " + std::to_string(length) + ")"));
    return std::string_view(text, length);
  }

  // A count of items that each take at least `min_item_bytes`: larger than the rest of the
  // file could hold means a damaged header (and would otherwise size huge allocations).
  Status check_count(uint64_t count, size_t min_item_bytes, const std::string& what) const {
    if (min_item_bytes > 0 && count > remaining() / min_item_bytes) {
      return fail(what + " is " + std::to_string(count) + ", more than the " + std::to_string(remaining()) +
                  " bytes left in the file can hold");
    }
    return ok_status();
  }

 private:
  const MappedFile& file_;
  size_t offset_ = 0;
};

// Reads a T and widens it into `field`.
template <typename T, typename Field>
Status read_into(HeaderReader& in, const std::string& what, Field& field) {
  KUIPER_ASSIGN_OR_RETURN(T v, in.read<T>(what));
  field = static_cast<Field>(v);
  return ok_status();
}

Status read_array(HeaderReader& in, const std::string& what, int depth, GgufValue& value) {
  if (depth >= kMaxArrayNesting) {
    return in.fail(what + " nests arrays more than " + std::to_string(kMaxArrayNesting) + " deep");
  }
  KUIPER_ASSIGN_OR_RETURN(uint32_t element_type, in.read<uint32_t>("the element type of " + what));
  const std::optional<size_t> element_bytes = scalar_bytes(element_type);
  if (!element_bytes) return in.fail(what + " has unknown element type " + std::to_string(element_type));
  KUIPER_ASSIGN_OR_RETURN(value.count, in.read<uint64_t>("the length of " + what));
  value.element_type = static_cast<GgufType>(element_type);
  // A string or nested array takes at least its 8-byte length.
  KUIPER_RETURN_IF_ERROR(in.check_count(value.count, *element_bytes > 0 ? *element_bytes : 8, "the length of " + what));
  if (*element_bytes > 0) {
    value.elements = in.here();
    return in.skip(value.count * *element_bytes, what);
  }
  if (value.element_type == GgufType::kString) value.strings.reserve(value.count);
  for (uint64_t i = 0; i < value.count; ++i) {
    const std::string item = what + "[" + std::to_string(i) + "]";
    if (value.element_type == GgufType::kString) {
      KUIPER_ASSIGN_OR_RETURN(std::string_view s, in.read_string(item));
      value.strings.push_back(s);
    } else {
      GgufValue nested;
      KUIPER_RETURN_IF_ERROR(read_array(in, item, depth + 1, nested));
    }
  }
  return ok_status();
}

Status read_value(HeaderReader& in, uint32_t type_id, const std::string& what, int depth, GgufValue& value) {
  if (!scalar_bytes(type_id)) return in.fail(what + " has unknown value type " + std::to_string(type_id));
  value.type = static_cast<GgufType>(type_id);
  switch (value.type) {
    case GgufType::kUint8: return read_into<uint8_t>(in, what, value.as_uint);
    case GgufType::kUint16: return read_into<uint16_t>(in, what, value.as_uint);
    case GgufType::kUint32: return read_into<uint32_t>(in, what, value.as_uint);
    case GgufType::kUint64: return read_into<uint64_t>(in, what, value.as_uint);
    case GgufType::kInt8: return read_into<int8_t>(in, what, value.as_int);
    case GgufType::kInt16: return read_into<int16_t>(in, what, value.as_int);
    case GgufType::kInt32: return read_into<int32_t>(in, what, value.as_int);
    case GgufType::kInt64: return read_into<int64_t>(in, what, value.as_int);
    case GgufType::kFloat32: return read_into<float>(in, what, value.as_float);
    case GgufType::kFloat64: return read_into<double>(in, what, value.as_float);
    case GgufType::kBool: {
      KUIPER_RETURN_IF_ERROR(read_into<uint8_t>(in, what, value.as_uint));
      if (value.as_uint > 1) return in.fail(what + " is a bool holding " + std::to_string(value.as_uint));
      return ok_status();
    }
    case GgufType::kString: {
      KUIPER_ASSIGN_OR_RETURN(value.as_string, in.read_string(what));
      return ok_status();
    }
    case GgufType::kArray: return read_array(in, what, depth, value);
  }
  return ok_status();
}

uint64_t align_up(uint64_t offset, uint64_t alignment) { return (offset + alignment - 1) / alignment * alignment; }

}  // namespace

const char* ggml_type_name(uint32_t type) {
  const TypeSize* t = ggml_type(type);
  return t ? t->name : nullptr;
}

bool is_gguf_file(const std::string& path) {
  // The reader's own open and magic check, so that what is detected as GGUF is what it reads
  // (MappedFile refuses a FIFO without waiting for a writer).
  const auto file = MappedFile::open(path);
  return file.ok() && GgufFile::has_magic(**file);
}

bool GgufFile::has_magic(const MappedFile& file) {
  return file.size() >= sizeof(kMagic) && std::memcmp(file.data(), kMagic, sizeof(kMagic)) == 0;
}

StatusOr<GgufFile> GgufFile::open(std::shared_ptr<MappedFile> file) {
  GgufFile gguf;
  gguf.file_ = std::move(file);
  KUIPER_RETURN_IF_ERROR(gguf.parse());
  return gguf;
}

Status GgufFile::parse() {
  HeaderReader in(*file_);
  if (!has_magic(*file_)) return in.fail("not a GGUF file (no \"GGUF\" magic)");
  KUIPER_RETURN_IF_ERROR(in.skip(sizeof(kMagic), "magic"));
  KUIPER_ASSIGN_OR_RETURN(version_, in.read<uint32_t>("version"));
  if (version_ != 2 && version_ != 3) {
    return in.fail("GGUF version " + std::to_string(version_) + " (kuiper reads versions 2 and 3)");
  }
  KUIPER_ASSIGN_OR_RETURN(uint64_t tensor_count, in.read<uint64_t>("tensor_count"));
  KUIPER_ASSIGN_OR_RETURN(uint64_t metadata_count, in.read<uint64_t>("metadata_kv_count"));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8.
  KUIPER_RETURN_IF_ERROR(in.check_count(metadata_count, 13, "metadata_kv_count"));

  for (uint64_t i = 0; i < metadata_count; ++i) {
    KUIPER_ASSIGN_OR_RETURN(std::string_view key_view, in.read_string("key of metadata entry " + std::to_string(i)));
    const std::string key(key_view);
    if (metadata_.count(key)) return in.fail("metadata key '" + key + "' appears twice");
    KUIPER_ASSIGN_OR_RETURN(uint32_t type, in.read<uint32_t>("the type of metadata key '" + key + "'"));
    GgufValue value;
    KUIPER_RETURN_IF_ERROR(read_value(in, type, "metadata key '" + key + "'", 0, value));
    metadata_.emplace(key, std::move(value));
  }
  if (const GgufValue* alignment = find("general.alignment")) {
    if (alignment->type != GgufType::kUint32) return in.fail("general.alignment is not a uint32");
    const uint64_t a = alignment->as_uint;
    // The spec asks for a multiple of 8; a power of two keeps every tensor aligned for its type.
    if (a < 8 || a > kMaxAlignment || (a & (a - 1)) != 0) {
      return in.fail("general.alignment is " + std::to_string(a) + ", not a power of two from 8 to " +
                     std::to_string(kMaxAlignment));
    }
    alignment_ = static_cast<uint32_t>(a);
  }

  KUIPER_RETURN_IF_ERROR(in.check_count(tensor_count, 24, "tensor_count"));
  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    KUIPER_ASSIGN_OR_RETURN(std::string_view name_view, in.read_string("name of tensor " + std::to_string(i)));
    GgufTensorInfo info;
    info.name = std::string(name_view);
    const std::string what = "tensor " + info.name;
    if (tensor_index_.count(info.name)) return in.fail(what + " appears twice");
    KUIPER_ASSIGN_OR_RETURN(uint32_t n_dims, in.read<uint32_t>("n_dims of " + what));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return in.fail(what + " has " + std::to_string(n_dims) + " dimensions (1 to " + std::to_string(kMaxDims) + " allowed)");
    }
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      KUIPER_ASSIGN_OR_RETURN(uint64_t dim, in.read<uint64_t>("dimension " + std::to_string(d) + " of " + what));
      // Bounded by the file size, so the product below cannot overflow before it is checked.
      if (dim == 0 || dim > file_->size() || numel > file_->size() * uint64_t{8} / dim) {
        return in.fail(what + " has dimension " + std::to_string(dim) + ", impossible in a file of " +
                       std::to_string(file_->size()) + " bytes");
      }
      numel *= dim;
      info.dims.push_back(static_cast<int64_t>(dim));
    }
    KUIPER_ASSIGN_OR_RETURN(info.type, in.read<uint32_t>("type of " + what));
    const TypeSize* type = ggml_type(info.type);
    if (type == nullptr) return in.fail(what + " has unknown ggml type id " + std::to_string(info.type));
    if (info.dims[0] % type->block_weights != 0) {
      return in.fail(what + " has " + std::to_string(info.dims[0]) + " columns, not a multiple of the " +
                     std::to_string(type->block_weights) + "-weight blocks of " + type->name);
    }
    info.nbytes = numel / type->block_weights * type->block_bytes;
    KUIPER_ASSIGN_OR_RETURN(uint64_t offset, in.read<uint64_t>("offset of " + what));
    if (offset % alignment_ != 0) {
      return in.fail(what + " starts at data offset " + std::to_string(offset) + ", not a multiple of the alignment " +
                     std::to_string(alignment_));
    }
    if (offset > file_->size()) {
      return in.fail(what + " starts at data offset " + std::to_string(offset) + ", past the end of the file");
    }
    info.offset = offset;  // relative until the data section is known
    tensor_index_[info.name] = tensors_.size();
    tensors_.push_back(std::move(info));
  }

  const uint64_t data_start = align_up(in.offset(), alignment_);
  if (data_start > file_->size() && !tensors_.empty()) {
    return in.fail("the data section would start at offset " + std::to_string(data_start) + ", past the end of the file");
  }
  const uint64_t data_bytes = data_start <= file_->size() ? file_->size() - data_start : 0;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset) {
      return in.fail("tensor " + t.name + " (" + std::to_string(t.nbytes) + " bytes at data offset " +
                     std::to_string(t.offset) + ") runs past the end of the file (data section " +
                     std::to_string(data_bytes) + " bytes)");
    }
    t.offset += data_start;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& before = *by_offset[i - 1];
    if (before.offset + before.nbytes > by_offset[i]->offset) {
      return in.fail("tensors " + before.name + " and " + by_offset[i]->name + " overlap");
    }
  }
  return ok_status();
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status missing_or_wrong(const std::string& path, const std::string& key, const GgufValue* v, const char* expected) {
  if (v == nullptr) return not_found(path + ": metadata key '" + key + "' is missing");
  std::string actual = value_type_name(v->type);
  if (v->type == GgufType::kArray) actual += std::string(" of ") + value_type_name(v->element_type);
  return invalid_format(path + ": metadata key '" + key + "' is " + actual + ", expected " + expected);
}

bool is_unsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 || t == GgufType::kUint64;
}
bool is_signed(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 || t == GgufType::kInt64;
}

template <typename T>
T element(const GgufValue& v, uint64_t i) {
  T x;
  std::memcpy(&x, v.elements + i * sizeof(T), sizeof(T));
  return x;
}

}  // namespace

StatusOr<std::string_view> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kString) return missing_or_wrong(path(), key, v, "a string");
  return v->as_string;
}

StatusOr<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v != nullptr && is_unsigned(v->type)) return v->as_uint;
  if (v != nullptr && is_signed(v->type)) {
    if (v->as_int < 0) return invalid_format(path() + ": metadata key '" + key + "' is negative");
    return static_cast<uint64_t>(v->as_int);
  }
  return missing_or_wrong(path(), key, v, "an integer");
}

StatusOr<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || (v->type != GgufType::kFloat32 && v->type != GgufType::kFloat64)) {
    return missing_or_wrong(path(), key, v, "a float");
  }
  return v->as_float;
}

StatusOr<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kBool) return missing_or_wrong(path(), key, v, "a bool");
  return v->as_uint != 0;
}

StatusOr<std::vector<std::string_view>> GgufFile::get_strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kArray || v->element_type != GgufType::kString) {
    return missing_or_wrong(path(), key, v, "an array of strings");
  }
  return v->strings;
}

StatusOr<std::vector<float>> GgufFile::get_floats(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kArray || v->element_type != GgufType::kFloat32) {
    return missing_or_wrong(path(), key, v, "an array of float32");
  }
  std::vector<float> out(v->count);
  if (v->count > 0) std::memcpy(out.data(), v->elements, v->count * sizeof(float));
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::get_ints(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufType::kArray || !(is_signed(v->element_type) || is_unsigned(v->element_type))) {
    return missing_or_wrong(path(), key, v, "an array of integers");
  }
  std::vector<int64_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    switch (v->element_type) {
      case GgufType::kUint8: out[i] = element<uint8_t>(*v, i); break;
      case GgufType::kInt8: out[i] = element<int8_t>(*v, i); break;
      case GgufType::kUint16: out[i] = element<uint16_t>(*v, i); break;
      case GgufType::kInt16: out[i] = element<int16_t>(*v, i); break;
      case GgufType::kUint32: out[i] = element<uint32_t>(*v, i); break;
      case GgufType::kInt32: out[i] = element<int32_t>(*v, i); break;
      case GgufType::kInt64: out[i] = element<int64_t>(*v, i); break;
      default: out[i] = static_cast<int64_t>(element<uint64_t>(*v, i)); break;
    }
  }
  return out;
}

}  // namespace kuiper
