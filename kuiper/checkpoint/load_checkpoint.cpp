// The format registry: every format kuiper reads, one line each. Adding a format is a file in
// formats/ and a line here.
#include "kuiper/checkpoint/load_checkpoint.h"

#include <filesystem>

#include "kuiper/checkpoint/check_tensors.h"
#include "kuiper/checkpoint/formats/formats.h"
#include "kuiper/checkpoint/formats/hf_safetensors.h"

namespace kuiper {
namespace {

// In the order auto-detection tries them. Formats whose detection is weakest (no magic
// number) come last.
std::vector<const CheckpointFormat*> all_formats() {
  return {
      &gguf_format(),
      &kuiper_format(),  // kuiper's files are safetensors too: tried before the generic reader
      &hf_safetensors_format(),
      &llama2c_v1_format(),
      &llama2c_v2_format(),
      &kuiperllama_v3_format(),
      &llama2c_v0_format(),
  };
}

// Names that earlier versions used for a format.
std::string canonical_format_name(const std::string& name) {
  if (name == "kuiper-v3") return kuiperllama_v3_format().name;  // read as kuiper's own, it is KuiperLLama's
  return name;
}

// Every format's checkpoint, with its small tensors checked for NaN and Inf (check_tensors.h).
StatusOr<Checkpoint> checked(StatusOr<Checkpoint> loaded) {
  if (loaded.ok()) KUIPER_RETURN_IF_ERROR(check_small_tensors_finite(*loaded));
  return loaded;
}

}  // namespace

std::vector<std::string> checkpoint_format_names() {
  std::vector<std::string> names = {"auto"};
  for (const CheckpointFormat* f : all_formats()) names.emplace_back(f->name);
  return names;
}

StatusOr<Checkpoint> load_checkpoint(const std::string& path, const LoadOptions& given) {
  LoadOptions options = given;
  options.format = canonical_format_name(given.format);
  // A directory is a Hugging Face model (config.json + safetensors); files go by their content.
  std::error_code not_a_directory;  // a path stat() cannot reach is reported by the file's open
  if (std::filesystem::is_directory(path, not_a_directory) &&
      (options.format == "auto" || options.format == hf_safetensors_format().name)) {
    return checked(load_hf_checkpoint(path));
  }
  KUIPER_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  const auto formats = all_formats();
  if (options.format != "auto") {
    for (const CheckpointFormat* f : formats) {
      if (options.format == f->name) return checked(f->load(file));
    }
    std::string known;
    for (const auto& name : checkpoint_format_names()) known += (known.empty() ? "" : ", ") + name;
    return invalid_argument("unknown checkpoint format '" + options.format + "' (known: " + known + ")");
  }
  for (const CheckpointFormat* f : formats) {
    if (f->detect(file)) return checked(f->load(file));
  }
  return invalid_format(path + ": not a checkpoint format kuiper recognises");
}

}  // namespace kuiper
