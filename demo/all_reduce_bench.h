// The time of the all-reduces a tensor-parallel decode step makes (two per layer, of one
// residual row), measured on their own over a group like the model's.
#pragma once

#include "kuiper/base/device.h"

namespace kuiper::cli {

// Median seconds of `count` back-to-back all-reduces of `floats` fp32 values over `ranks` ranks
// of `device` (each rank on its own thread and GPU, as in the model), in the communicators'
// shared memory as the model's are (`shared`), or in memory from the device's allocator.
StatusOr<double> all_reduce_seconds(DeviceType device, int ranks, int64_t floats, int count, bool shared);

}  // namespace kuiper::cli
