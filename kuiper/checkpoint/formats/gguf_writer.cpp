#include "kuiper/checkpoint/formats/gguf_writer.h"

#include <cstring>

#include "kuiper/base/partial_file.h"

namespace kuiper {
namespace {

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

template <typename T>
std::string array_payload(GgufType element_type, const std::vector<T>& values) {
  std::string out;
  put<uint32_t>(out, static_cast<uint32_t>(element_type));
  put<uint64_t>(out, values.size());
  for (const T& v : values) put(out, v);
  return out;
}

size_t element_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    default: return 8;
  }
}

// A scalar value as the file stores it.
std::string scalar_payload(const GgufValue& v) {
  std::string out;
  switch (v.type) {
    case GgufType::kUint8: case GgufType::kBool: put<uint8_t>(out, static_cast<uint8_t>(v.as_uint)); break;
    case GgufType::kUint16: put<uint16_t>(out, static_cast<uint16_t>(v.as_uint)); break;
    case GgufType::kUint32: put<uint32_t>(out, static_cast<uint32_t>(v.as_uint)); break;
    case GgufType::kUint64: put<uint64_t>(out, v.as_uint); break;
    case GgufType::kInt8: put<int8_t>(out, static_cast<int8_t>(v.as_int)); break;
    case GgufType::kInt16: put<int16_t>(out, static_cast<int16_t>(v.as_int)); break;
    case GgufType::kInt32: put<int32_t>(out, static_cast<int32_t>(v.as_int)); break;
    case GgufType::kInt64: put<int64_t>(out, v.as_int); break;
    case GgufType::kFloat32: put<float>(out, static_cast<float>(v.as_float)); break;
    case GgufType::kFloat64: put<double>(out, v.as_float); break;
    case GgufType::kString: put_string(out, v.as_string); break;
    case GgufType::kArray: break;
  }
  return out;
}

}  // namespace

void GgufWriter::add_entry(const std::string& key, GgufType type, std::string payload) {
  if (!keys_.insert(key).second) duplicates_.push_back("metadata key '" + key + "'");
  put_string(metadata_, key);
  put<uint32_t>(metadata_, static_cast<uint32_t>(type));
  metadata_ += payload;
  ++metadata_count_;
}

void GgufWriter::add_string(const std::string& key, std::string_view value) {
  std::string payload;
  put_string(payload, value);
  add_entry(key, GgufType::kString, std::move(payload));
}
void GgufWriter::add_uint32(const std::string& key, uint32_t value) {
  std::string payload;
  put(payload, value);
  add_entry(key, GgufType::kUint32, std::move(payload));
}
void GgufWriter::add_int32(const std::string& key, int32_t value) {
  std::string payload;
  put(payload, value);
  add_entry(key, GgufType::kInt32, std::move(payload));
}
void GgufWriter::add_float32(const std::string& key, float value) {
  std::string payload;
  put(payload, value);
  add_entry(key, GgufType::kFloat32, std::move(payload));
}
void GgufWriter::add_bool(const std::string& key, bool value) {
  add_entry(key, GgufType::kBool, std::string(1, value ? 1 : 0));
}
void GgufWriter::add_strings(const std::string& key, const std::vector<std::string_view>& values) {
  std::string payload;
  put<uint32_t>(payload, static_cast<uint32_t>(GgufType::kString));
  put<uint64_t>(payload, values.size());
  for (std::string_view v : values) put_string(payload, v);
  add_entry(key, GgufType::kArray, std::move(payload));
}
void GgufWriter::add_floats(const std::string& key, const std::vector<float>& values) {
  add_entry(key, GgufType::kArray, array_payload(GgufType::kFloat32, values));
}
void GgufWriter::add_int32s(const std::string& key, const std::vector<int32_t>& values) {
  add_entry(key, GgufType::kArray, array_payload(GgufType::kInt32, values));
}

Status GgufWriter::add_value(const std::string& key, const GgufValue& value) {
  if (value.type != GgufType::kArray) {
    add_entry(key, value.type, scalar_payload(value));
    return ok_status();
  }
  if (value.element_type == GgufType::kString) {
    add_strings(key, value.strings);
    return ok_status();
  }
  if (value.element_type == GgufType::kArray) return unsupported("metadata key '" + key + "' is an array of arrays");
  std::string payload;
  put<uint32_t>(payload, static_cast<uint32_t>(value.element_type));
  put<uint64_t>(payload, value.count);
  payload.append(reinterpret_cast<const char*>(value.elements), value.count * element_bytes(value.element_type));
  add_entry(key, GgufType::kArray, std::move(payload));
  return ok_status();
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape, size_t nbytes,
                            TensorBytes bytes) {
  for (const Tensor& t : tensors_) {
    if (t.name == name) duplicates_.push_back("tensor " + name);
  }
  tensors_.push_back({name, type, shape, nbytes, std::move(bytes)});
}

Status GgufWriter::write(const std::string& path) const {
  if (!duplicates_.empty()) return invalid_argument(path + ": " + duplicates_.front() + " added twice");
  std::string header = "GGUF";
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, metadata_count_);
  header += metadata_;
  const auto padding = [](size_t offset) {
    return (kGgufDefaultAlignment - offset % kGgufDefaultAlignment) % kGgufDefaultAlignment;
  };
  size_t data_offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(header, static_cast<uint64_t>(*d));
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, data_offset);
    data_offset += t.nbytes + padding(t.nbytes);
  }
  header.append(padding(header.size()), '\0');

  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<PartialFile> file, PartialFile::create(path));
  KUIPER_RETURN_IF_ERROR(file->write(header.data(), header.size()));
  const std::string zeros(kGgufDefaultAlignment, '\0');
  for (const Tensor& t : tensors_) {
    KUIPER_ASSIGN_OR_RETURN(std::string bytes, t.bytes());
    if (bytes.size() != t.nbytes) {
      return internal_error(path + ": tensor " + t.name + " produced " + std::to_string(bytes.size()) + " bytes, " +
                            std::to_string(t.nbytes) + " declared");
    }
    KUIPER_RETURN_IF_ERROR(file->write(bytes.data(), bytes.size()));
    KUIPER_RETURN_IF_ERROR(file->write(zeros.data(), padding(t.nbytes)));
  }
  return file->commit();
}

}  // namespace kuiper
