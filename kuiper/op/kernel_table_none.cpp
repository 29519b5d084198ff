// Builds without CUDA have an empty CUDA table: every lookup reports the kernel as missing.
#include "kuiper/op/kernel_table.h"

namespace kuiper::op {

const KernelTable& cuda_kernel_table() {
  static const KernelTable empty;
  return empty;
}

}  // namespace kuiper::op
