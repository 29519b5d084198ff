// One checkpoint format, forced (KUIPER_FUZZ_FORMAT, a load_checkpoint format name, is set per
// harness by CMake): any bytes must load or be refused with a Status, never crash.
#include "kuiper/checkpoint/check_tensors.h"
#include "kuiper/checkpoint/checkpoint_convert.h"
#include "kuiper/checkpoint/load_checkpoint.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kuiper::fuzz::write_scratch_file("model.bin", data, size);
  auto checkpoint = kuiper::load_checkpoint(path, {KUIPER_FUZZ_FORMAT});
  if (!checkpoint.ok()) return 0;
  // A loaded checkpoint's tensors must all lie inside the file: reading every value proves it.
  (void)kuiper::check_tensors_finite(*checkpoint);
  // And whatever values they hold (NaN, Inf), quantizing them must be defined behaviour.
  (void)kuiper::convert_checkpoint(*checkpoint, {kuiper::DataType::kINT8, 8});
  return 0;
}
