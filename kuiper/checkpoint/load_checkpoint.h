// Loading a model file of any format kuiper reads: the format registry.
#pragma once

#include <string>
#include <vector>

#include "kuiper/checkpoint/checkpoint.h"

namespace kuiper {

struct LoadOptions {
  // "auto" recognises the format from the file; a name from checkpoint_format_names() forces
  // one (needed for formats without a magic number).
  std::string format = "auto";
};

StatusOr<Checkpoint> load_checkpoint(const std::string& path, const LoadOptions& options = {});

// Names accepted by LoadOptions::format, for --help and error messages.
std::vector<std::string> checkpoint_format_names();

}  // namespace kuiper
