#include "kuiper/parallel/communicator.h"

#include <string>

namespace kuiper::parallel {

StatusOr<std::vector<std::unique_ptr<Communicator>>> make_communicators(DeviceType device, int ranks) {
  if (ranks < 1) return invalid_argument("a tensor-parallel group needs at least one rank");
  if (device == DeviceType::kCPU) return make_in_process_communicators(ranks);
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  if (ranks > cuda_device_count()) {
    return invalid_argument("--tp " + std::to_string(ranks) + " needs " + std::to_string(ranks) +
                            " GPUs; this machine has " + std::to_string(cuda_device_count()));
  }
  return make_nccl_communicators(ranks);
}

bool nccl_symmetric_kernels_wait(int version) {
  return (version >= 22700 && version < 22800) || version >= 23007;
}

}  // namespace kuiper::parallel
