// A safetensors file's header (JSON: dtypes, shapes, offsets) and every tensor it describes.
#include "kuiper/checkpoint/formats/safetensors.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kuiper::fuzz::write_scratch_file("model.safetensors", data, size);
  auto file = kuiper::SafetensorsFile::open(path);
  if (!file.ok()) return 0;
  for (const std::string& name : file->names()) (void)file->tensor(name);
  return 0;
}
