// Builds without NCCL 2.27 or later (no CUDA, or a CUDA toolkit without it): a GPU group
// cannot be made.
#include "kuiper/parallel/communicator.h"

namespace kuiper::parallel {

StatusOr<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(int) {
  return unsupported("this build of kuiper has no NCCL (2.27 or later), so it cannot split a model over GPUs "
                     "(configure with CUDA and NCCL, or set NCCL_ROOT)");
}

}  // namespace kuiper::parallel
