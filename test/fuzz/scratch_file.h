// The loaders read files by path, so a fuzz input is written to a file first, in a scratch
// directory of this process (under /dev/shm when it exists, to keep the disk out of the loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kuiper::fuzz {

// The scratch directory, created on first use.
const std::string& scratch_dir();

// Writes `size` bytes to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size);

}  // namespace kuiper::fuzz
