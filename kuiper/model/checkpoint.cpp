#include "kuiper/model/checkpoint.h"

#include <filesystem>

#include "kuiper/model/hf_checkpoint.h"
#include "kuiper/model/kuiper_checkpoint.h"
#include "kuiper/model/quantized_formats.h"

namespace kuiper {
namespace {

// Every format kuiper reads, in the order auto-detection tries them. Formats whose detection
// is weakest (no magic number) come last.
std::vector<const CheckpointFormat*> all_formats() {
  // kuiper's own files are safetensors too: their format must be tried before the generic one.
  return {&kuiper_format(), &hf_safetensors_format(), &llama2c_v1_format(), &llama2c_v2_format(),
          &kuiperllama_v3_format(), &llama2c_v0_format()};
}

}  // namespace

FileCursor::FileCursor(std::shared_ptr<MappedFile> file)
    : file_(std::move(file)),
      buffer_(Buffer::borrow(const_cast<uint8_t*>(file_->data()), file_->size(), DeviceType::kCPU,
                             file_)) {}

Status FileCursor::seek(size_t offset) {
  if (offset > file_->size()) {
    return invalid_format(file_->path() + ": offset " + std::to_string(offset) +
                          " is past the end of the file (" + std::to_string(file_->size()) + " bytes)");
  }
  offset_ = offset;
  return ok_status();
}

Status FileCursor::skip(size_t bytes, const char* what) {
  if (bytes > remaining()) {
    return invalid_format(file_->path() + ": truncated: " + what + " needs " + std::to_string(bytes) +
                          " bytes, " + std::to_string(remaining()) + " left");
  }
  offset_ += bytes;
  return ok_status();
}

StatusOr<Tensor> FileCursor::take(DataType dtype, const Shape& shape, const std::string& what) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (bytes > remaining()) {
    return invalid_format(file_->path() + ": truncated: " + what + " needs " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(offset_) + ", " +
                          std::to_string(remaining()) + " left");
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor t, Tensor::view(buffer_, offset_, dtype, shape));
  offset_ += bytes;
  return t;
}

std::vector<std::string> checkpoint_format_names() {
  std::vector<std::string> names = {"auto"};
  for (const CheckpointFormat* f : all_formats()) names.emplace_back(f->name);
  return names;
}

StatusOr<Checkpoint> load_checkpoint(const std::string& path, const LoadOptions& options) {
  // A directory is a Hugging Face model (config.json + safetensors); files go by their content.
  if (std::filesystem::is_directory(path) &&
      (options.format == "auto" || options.format == hf_safetensors_format().name)) {
    return load_hf_checkpoint(path);
  }
  KUIPER_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  const auto formats = all_formats();
  if (options.format != "auto") {
    for (const CheckpointFormat* f : formats) {
      if (options.format == f->name) return f->load(file);
    }
    std::string known;
    for (const auto& name : checkpoint_format_names()) known += (known.empty() ? "" : ", ") + name;
    return invalid_argument("unknown checkpoint format '" + options.format + "' (known: " + known + ")");
  }
  for (const CheckpointFormat* f : formats) {
    if (f->detect(file)) return f->load(file);
  }
  return invalid_format(path + ": not a checkpoint format kuiper recognises");
}

}  // namespace kuiper
