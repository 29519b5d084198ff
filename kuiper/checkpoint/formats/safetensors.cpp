#include "kuiper/checkpoint/formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kuiper/base/partial_file.h"

namespace kuiper {
namespace {

using json = nlohmann::json;

constexpr size_t kLengthPrefixBytes = 8;
constexpr size_t kDataAlignment = 64;

struct DtypeInfo {
  std::string_view name;
  size_t size;
  std::optional<DataType> kuiper_type;  // none: laid out and checked, but not computed with
};

// Every fixed-width dtype of the safetensors format. U8 holds kuiper's int4 weights, two to a
// byte (op/int4_weight.h); the safetensors format has no 4-bit type.
constexpr DtypeInfo kDtypes[] = {
    {"F32", 4, DataType::kFP32},  {"F16", 2, DataType::kFP16}, {"BF16", 2, DataType::kBF16},
    {"I8", 1, DataType::kINT8},   {"I32", 4, DataType::kINT32}, {"F64", 8, std::nullopt},
    {"I64", 8, std::nullopt},     {"U64", 8, std::nullopt},     {"U32", 4, std::nullopt},
    {"I16", 2, std::nullopt},     {"U16", 2, std::nullopt},     {"U8", 1, DataType::kINT4},
    {"BOOL", 1, std::nullopt},    {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

std::string offsets_text(size_t begin, size_t end) {
  std::string text = "[";  // built by appending: gcc 12 warns falsely on "[" + std::string
  text += std::to_string(begin) + ", " + std::to_string(end) + "]";
  return text;
}

// Bytes of a `shape` of elements of `size` bytes, or nullopt on overflow.
std::optional<size_t> shape_bytes(const Shape& shape, size_t size) {
  size_t bytes = size;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

// Entry of one tensor, with offsets still relative to the data section. Checks the fields'
// types and that the byte range matches shape × dtype.
StatusOr<SafetensorsEntry> parse_entry(const std::string& path, const std::string& name, const json& value) {
  const auto bad = [&](const std::string& what) {
    return invalid_format(path + ": tensor " + in_quotes(name) + ": " + what);
  };
  if (!value.is_object()) return bad("header entry is not an object");
  const auto dtype = value.find("dtype");
  const auto shape = value.find("shape");
  const auto offsets = value.find("data_offsets");
  if (dtype == value.end() || shape == value.end() || offsets == value.end()) {
    return bad("header entry needs dtype, shape and data_offsets");
  }
  if (!dtype->is_string()) return bad("dtype is not a string");
  SafetensorsEntry entry;
  entry.name = name;
  entry.dtype_name = dtype->get<std::string>();
  const DtypeInfo* info = find_dtype(entry.dtype_name);
  if (info == nullptr) return bad("unknown dtype " + in_quotes(entry.dtype_name));

  if (!shape->is_array()) return bad("shape is not an array");
  for (const json& d : *shape) {
    // Each dimension bounded so that a product of a few never wraps before the check below.
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
      return bad("shape " + shape->dump() + " has a dimension that is not a non-negative integer");
    }
    entry.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    return bad("data_offsets " + offsets->dump() + " is not a pair of non-negative integers");
  }
  const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
  if (end < begin) return bad("data_offsets " + offsets_text(begin, end) + " end before they begin");
  const std::optional<size_t> bytes = shape_bytes(entry.shape, info->size);
  if (!bytes || *bytes != end - begin) {
    return bad("data_offsets " + offsets_text(begin, end) + " hold " + std::to_string(end - begin) +
               " bytes but shape " + shape_to_string(entry.shape) + " of " + entry.dtype_name + " needs " +
               (bytes ? std::to_string(*bytes) : std::string("more than 2^64")));
  }
  entry.offset = begin;
  entry.nbytes = end - begin;
  return entry;
}

StatusOr<std::map<std::string, std::string>> parse_metadata(const std::string& path, const json& value) {
  std::map<std::string, std::string> metadata;
  if (!value.is_object()) return invalid_format(path + ": __metadata__ is not an object");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) return invalid_format(path + ": __metadata__ value of " + in_quotes(key) + " is not a string");
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

// Tensors must tile [0, data_bytes) exactly; `sorted` is ordered by offset.
Status check_tiling(const std::string& path, const std::vector<SafetensorsEntry*>& sorted,
                    size_t data_bytes) {
  size_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* e : sorted) {
    const std::string range = offsets_text(e->offset, e->offset + e->nbytes);
    if (e->offset + e->nbytes > data_bytes) {
      return invalid_format(path + ": tensor " + in_quotes(e->name) + " data_offsets " + range +
                            " run past the end of the data section (" + std::to_string(data_bytes) +
                            " bytes): file truncated or header corrupt");
    }
    if (e->offset < expected) {
      return invalid_format(path + ": tensor " + in_quotes(e->name) + " data_offsets " + range +
                            " overlap tensor " + in_quotes(previous->name) + " ending at " + std::to_string(expected));
    }
    if (e->offset > expected) {
      return invalid_format(path + ": tensor " + in_quotes(e->name) + " data_offsets " + range +
                            " leave a gap after byte " + std::to_string(expected));
    }
    expected = e->offset + e->nbytes;
    previous = e;
  }
  if (expected != data_bytes) {
    return invalid_format(path + ": data section is " + std::to_string(data_bytes) +
                          " bytes but its tensors cover " + std::to_string(expected));
  }
  return ok_status();
}

}  // namespace

std::optional<DataType> dtype_from_safetensors(std::string_view name) {
  const DtypeInfo* info = find_dtype(name);
  return info ? info->kuiper_type : std::nullopt;
}

std::string_view safetensors_dtype_name(DataType dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.kuiper_type == dtype) return d.name;
  }
  return "?";
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile st;
  KUIPER_ASSIGN_OR_RETURN(st.file_, MappedFile::open(path));
  const size_t file_bytes = st.file_->size();
  if (file_bytes < kLengthPrefixBytes) {
    return invalid_format(path + ": " + std::to_string(file_bytes) + " bytes is too short for a safetensors header");
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, st.file_->data(), sizeof(header_bytes));
  if (header_bytes > kMaxSafetensorsHeaderBytes || header_bytes > file_bytes - kLengthPrefixBytes) {
    return invalid_format(path + ": header length " + std::to_string(header_bytes) + " exceeds " +
                          (header_bytes > kMaxSafetensorsHeaderBytes ? "the 100 MB limit" : "the file") +
                          " (" + std::to_string(file_bytes) + " bytes)");
  }
  const auto* text = reinterpret_cast<const char*>(st.file_->data() + kLengthPrefixBytes);
  json header;
  try {
    header = json::parse(text, text + header_bytes);
  } catch (const json::exception& e) {
    return invalid_format(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) return invalid_format(path + ": header is not a JSON object");

  const size_t data_start = kLengthPrefixBytes + header_bytes;
  std::vector<SafetensorsEntry*> by_offset;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      KUIPER_ASSIGN_OR_RETURN(st.metadata_, parse_metadata(path, value));
      continue;
    }
    KUIPER_ASSIGN_OR_RETURN(SafetensorsEntry entry, parse_entry(path, name, value));
    by_offset.push_back(&st.entries_.emplace(name, std::move(entry)).first->second);
  }
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->offset < b->offset; });
  KUIPER_RETURN_IF_ERROR(check_tiling(path, by_offset, file_bytes - data_start));
  for (SafetensorsEntry* e : by_offset) {
    // Offsets become absolute once they are known to lie inside the file.
    e->offset += data_start;
    st.names_.push_back(e->name);
  }
  st.mapping_ = Buffer::borrow(const_cast<uint8_t*>(st.file_->data()), file_bytes, DeviceType::kCPU, st.file_);
  return st;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

StatusOr<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return not_found(path() + ": no tensor " + in_quotes(name));
  const std::optional<DataType> dtype = dtype_from_safetensors(e->dtype_name);
  if (!dtype) {
    return unsupported(path() + ": tensor " + in_quotes(name) + " has dtype " + e->dtype_name +
                       ", which kuiper does not compute with (F32, F16, BF16, I8, I32, U8)");
  }
  // The mapping starts page-aligned, so the file offset decides the address alignment.
  if (e->offset % dtype_size(*dtype) == 0) return Tensor::view(mapping_, e->offset, *dtype, e->shape);
  KUIPER_ASSIGN_OR_RETURN(Tensor copy, Tensor::empty(*dtype, e->shape, cpu_allocator()));
  std::memcpy(copy.raw_data(), file_->data() + e->offset, e->nbytes);
  return copy;
}

// ---- writer ----------------------------------------------------------------------------------

Status SafetensorsWriter::add(const std::string& name, const Tensor& tensor) {
  if (name.empty() || name == "__metadata__") {
    return invalid_argument("safetensors: tensor name " + in_quotes(name) + " is empty or reserved");
  }
  if (tensor.is_empty()) return invalid_argument("safetensors: tensor " + in_quotes(name) + " has no data");
  for (const Pending& p : tensors_) {
    if (p.name == name) return invalid_argument("safetensors: tensor " + in_quotes(name) + " added twice");
  }
  tensors_.push_back({name, tensor});
  return ok_status();
}

Status SafetensorsWriter::write(const std::string& path) const {
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors_[a].tensor.dtype()) > dtype_size(tensors_[b].tensor.dtype());
  });

  json header = json::object();
  size_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors_[i].tensor;
    header[tensors_[i].name] = {{"dtype", std::string(safetensors_dtype_name(t.dtype()))},
                                {"shape", t.shape()},
                                {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  // Trailing spaces are valid JSON whitespace; they align the data section.
  text.append((kDataAlignment - (kLengthPrefixBytes + text.size()) % kDataAlignment) % kDataAlignment, ' ');

  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<PartialFile> out, PartialFile::create(path));
  const uint64_t header_bytes = text.size();
  KUIPER_RETURN_IF_ERROR(out->write(&header_bytes, sizeof(header_bytes)));
  KUIPER_RETURN_IF_ERROR(out->write(text.data(), text.size()));
  for (size_t i : order) {
    const Tensor& t = tensors_[i].tensor;
    if (t.device() == DeviceType::kCPU) {
      KUIPER_RETURN_IF_ERROR(out->write(t.raw_data(), t.nbytes()));
    } else {
      KUIPER_ASSIGN_OR_RETURN(Tensor host, t.to(cpu_allocator()));
      KUIPER_RETURN_IF_ERROR(out->write(host.raw_data(), host.nbytes()));
    }
  }
  return out->commit();
}

}  // namespace kuiper
