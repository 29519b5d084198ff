#include "kuiper/op/execution_context.h"

#include <string>

namespace kuiper::op {

const char* scratch_use_name(ScratchUse use) {
  switch (use) {
    case ScratchUse::kGemmInput: return "GEMM input rounding";
    case ScratchUse::kDequantizedWeight: return "dequantized weights";
    case ScratchUse::kAttentionPartials: return "attention partials";
    case ScratchUse::kNormedInput: return "normed decode input";
    case ScratchUse::kCount: break;
  }
  return "unknown";
}

StatusOr<std::unique_ptr<ExecutionContext>> ExecutionContext::create(DeviceType device, const ScratchPlan& plan,
                                                                     StreamChoice stream) {
  std::unique_ptr<ExecutionContext> ctx(new ExecutionContext());
  ctx->device_ = device;
  ctx->plan_ = plan;
  KUIPER_ASSIGN_OR_RETURN(ctx->allocator_, allocator_for(device));
  if (stream == StreamChoice::kOwn) {
    KUIPER_ASSIGN_OR_RETURN(ctx->stream_, create_stream(device));
    ctx->owns_stream_ = ctx->stream_ != nullptr;  // the CPU has none
  }
  for (int i = 0; i < static_cast<int>(ScratchUse::kCount); ++i) {
    if (plan.bytes[i] == 0) continue;
    KUIPER_ASSIGN_OR_RETURN(ctx->scratch_[i], ctx->allocator_->allocate(plan.bytes[i]));
  }
  if (device == DeviceType::kCUDA) {
    KUIPER_ASSIGN_OR_RETURN(ctx->backend_, create_cuda_backend_state(ctx->stream_, *ctx->allocator_));
  }
  return ctx;
}

ExecutionContext::~ExecutionContext() {
  // Work still queued may use the scratch: it finishes before the memory goes back.
  if (device_ == DeviceType::kCUDA) (void)synchronize(stream_);
  backend_.reset();
  for (int i = 0; i < static_cast<int>(ScratchUse::kCount); ++i) {
    if (scratch_[i] != nullptr) allocator_->release(scratch_[i], plan_.bytes[i]);
  }
  if (owns_stream_) destroy_stream(stream_);
}

StatusOr<void*> ExecutionContext::scratch(ScratchUse use, size_t bytes) const {
  const int i = static_cast<int>(use);
  if (bytes > plan_.bytes[i]) {
    return resource_exhausted(std::string(scratch_use_name(use)) + " needs " + std::to_string(bytes) +
                              " bytes of scratch, but the execution context was made with " +
                              std::to_string(plan_.bytes[i]));
  }
  return scratch_[i];
}

}  // namespace kuiper::op
