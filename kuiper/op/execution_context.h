// Where kernels run and what they may use there: the device, one stream, the device's
// allocator, a scratch arena sized when the context is made, and the backend's own state (on
// CUDA the cuBLAS handle and its workspace). A model owns one context and hands it to every
// kernel it queues, so kernels keep no state of their own: two models in one process never share
// scratch, and a CUDA graph recorded on the first decode step reads memory that stays put.
#pragma once

#include <cstddef>
#include <memory>

#include "kuiper/base/allocator.h"
#include "kuiper/base/device.h"
#include "kuiper/base/status.h"

namespace kuiper::op {

// What a kernel borrows scratch memory for. Each use has its own region, because one kernel
// can hold two at once (the int8/int4 prefill GEMM reads its dequantized weights and its rounded
// inputs together).
enum class ScratchUse {
  kGemmInput,          // CUDA: fp32 activations in the form a matmul multiplies: rounded to a
                       // 16-bit weight type for the GEMM, or quantized to int8 (1.25 bytes an
                       // input) for the int8/int4 multi-token GEMV
  kDequantizedWeight,  // CUDA: an int8/int4 matrix dequantized to bf16 for the prefill GEMM
  kAttentionPartials,  // CUDA: split-cache decode attention's partial outputs, maxima and sums
  kNormedInput,        // CUDA: a decode GEMV's input normalized before the GEMV reads it, where
                       // the kernel cannot sum x's squares as it reads (DecodeGemv::in_norm_weight)
  kCount,
};
const char* scratch_use_name(ScratchUse use);

// Bytes of each scratch region. A kernel asking for more than its region holds gets an error
// naming the region, never a new allocation (which would move memory a recorded graph uses).
struct ScratchPlan {
  size_t bytes[static_cast<int>(ScratchUse::kCount)] = {};
  size_t& operator[](ScratchUse use) { return bytes[static_cast<int>(use)]; }
  size_t operator[](ScratchUse use) const { return bytes[static_cast<int>(use)]; }
};

// A backend's per-context state (CUDA: kernels/cuda/cuda_backend.cuh).
class BackendState {
 public:
  virtual ~BackendState() = default;
};

class ExecutionContext {
 public:
  enum class StreamChoice {
    kOwn,      // a stream of its own (none on the CPU): work can be recorded as a CUDA graph
    kDefault,  // the device's default stream, ordered with every copy and allocation made
               // without a stream: for callers that queue work outside the context (tests)
  };
  // A context on `device` with the scratch of `plan`.
  static StatusOr<std::unique_ptr<ExecutionContext>> create(DeviceType device, const ScratchPlan& plan = {},
                                                            StreamChoice stream = StreamChoice::kOwn);
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  DeviceType device() const { return device_; }
  Stream stream() const { return stream_; }
  Allocator& allocator() const { return *allocator_; }
  BackendState* backend() const { return backend_.get(); }

  // The region of `use`, at least `bytes` long, or an error saying how much it holds.
  StatusOr<void*> scratch(ScratchUse use, size_t bytes) const;

 private:
  ExecutionContext() = default;

  DeviceType device_ = DeviceType::kCPU;
  Stream stream_ = nullptr;
  bool owns_stream_ = false;
  Allocator* allocator_ = nullptr;
  ScratchPlan plan_;
  void* scratch_[static_cast<int>(ScratchUse::kCount)] = {};
  std::unique_ptr<BackendState> backend_;
};

// The CUDA backend's state for a context on `stream` (kernels/cuda/cuda_backend.cu); an error in
// builds without CUDA (cuda_backend_none.cpp).
StatusOr<std::unique_ptr<BackendState>> create_cuda_backend_state(Stream stream, Allocator& allocator);

}  // namespace kuiper::op
