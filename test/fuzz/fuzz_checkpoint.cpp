// One checkpoint format, forced (KUIPER_FUZZ_FORMAT, a load_checkpoint format name, is set per
// harness by CMake): any bytes must load or be refused with a Status, never crash.
#include "kuiper/checkpoint/check_tensors.h"
#include "kuiper/checkpoint/load_checkpoint.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kuiper::fuzz::write_scratch_file("model.bin", data, size);
  auto checkpoint = kuiper::load_checkpoint(path, {KUIPER_FUZZ_FORMAT});
  // A loaded checkpoint's tensors must all lie inside the file: reading every value proves it.
  if (checkpoint.ok()) (void)kuiper::check_tensors_finite(*checkpoint);
  return 0;
}
