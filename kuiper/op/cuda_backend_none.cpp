// Builds without CUDA: no CUDA backend state can be made.
#include "kuiper/op/execution_context.h"

namespace kuiper::op {

StatusOr<std::unique_ptr<BackendState>> create_cuda_backend_state(Stream, Allocator&) {
  return unsupported(cuda_unavailable_reason());
}

}  // namespace kuiper::op
