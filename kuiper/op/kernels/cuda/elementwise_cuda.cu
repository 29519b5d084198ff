// Element-wise kernels (swiglu, add) and the greedy pick (argmax).
#include <cub/block/block_reduce.cuh>

#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/cuda_kernels.cuh"
#include "kuiper/op/kernels/cuda/elementwise_loop.cuh"

namespace kuiper::op::cuda {
namespace {

constexpr int kArgmaxThreads = 1024;

template <int W>
__device__ __forceinline__ Floats<W> silu_times(const Floats<W>& g, const Floats<W>& u) {
  Floats<W> y;
#pragma unroll
  for (int k = 0; k < W; ++k) y.v[k] = g.v[k] / (1.f + expf(-g.v[k])) * u.v[k];
  return y;
}

template <int kWidth, typename Out>
__global__ void swiglu_kernel(const float* gate, const float* up, Out* out, int64_t n) {
  for_each_group<kWidth>(n, [&]<int W>(int64_t i) {
    silu_times(Floats<W>::load(gate + i), Floats<W>::load(up + i)).store_as(out + i);
  });
}

// Element i of out [rows, n] reads row i / n of gate_up [rows, 2n]: its gate at column i % n,
// its up n further. A group of kWidth never straddles rows (the launch takes width 4 only where
// n is a multiple of 4).
template <int kWidth, typename Out>
__global__ void swiglu_stacked_kernel(const float* gate_up, Out* out, int64_t n, int64_t total) {
  for_each_group<kWidth>(total, [&]<int W>(int64_t i) {
    const int64_t row = i / n;
    const float* gate = gate_up + i + row * n;
    silu_times(Floats<W>::load(gate), Floats<W>::load(gate + n)).store_as(out + i);
  });
}

template <int kWidth>
__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for_each_group<kWidth>(n, [&]<int W>(int64_t i) {
    const Floats<W> x = Floats<W>::load(a + i), y = Floats<W>::load(b + i);
    Floats<W> sum;
#pragma unroll
    for (int k = 0; k < W; ++k) sum.v[k] = x.v[k] + y.v[k];
    sum.store(out + i);
  });
}

struct Candidate {
  float value;
  int index;
};

// The larger value wins; on equal values the smaller index, as the CPU kernel's scan does.
struct BetterCandidate {
  __device__ Candidate operator()(const Candidate& a, const Candidate& b) const {
    if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
    return a;
  }
};

// One block per row: the logits of one token are at most a few hundred KB, far below what
// would repay a second pass.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int n,
                                                                int32_t* out) {
  logits += static_cast<int64_t>(blockIdx.x) * n;
  Candidate best{-INFINITY, n};
  bool finite = true;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = logits[i];
    finite &= isfinite(v);
    if (v > best.value || best.index == n) best = {v, i};  // strided scan: first index kept
  }
  using Reduce = cub::BlockReduce<Candidate, kArgmaxThreads>;
  __shared__ typename Reduce::TempStorage storage;
  const Candidate winner = Reduce(storage).Reduce(best, BetterCandidate{});
  const bool all_finite = __syncthreads_and(finite);
  if (threadIdx.x == 0) out[blockIdx.x] = !all_finite ? -1 : winner.index == n ? 0 : winner.index;
}

__global__ void add_bias_kernel(float* __restrict__ x, const float* __restrict__ bias, int64_t n, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += bias[i % n];
  }
}

// a and b fp32, out fp32 or (swiglu) a 16-bit type, all of one size.
Status check_operands(const Tensor& a, const Tensor& b, const Tensor& out, const char* what) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(a, DataType::kFP32, what));
  KUIPER_RETURN_IF_ERROR(expect_cuda(b, DataType::kFP32, what));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(out, what));
  if (a.numel() != b.numel() || a.numel() != out.numel()) {
    return invalid_argument(std::string(what) + " operands differ in size: " + a.describe() +
                            ", " + b.describe() + ", " + out.describe());
  }
  return ok_status();
}

}  // namespace

Status swiglu(const Tensor& gate, const Tensor& up, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_operands(gate, up, out, "swiglu"));
  const int64_t n = out.numel();
  KUIPER_RETURN_IF_ERROR(dispatch_float_type(out.dtype(), [&](auto zero) {
    using Out = decltype(zero);
    launch_by_width(n, {gate.raw_data(), up.raw_data(), out.raw_data()}, [&](auto width, unsigned blocks) {
      swiglu_kernel<width()><<<blocks, kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
          gate.data<float>(), up.data<float>(), static_cast<Out*>(out.raw_data()), n);
    });
    return ok_status();
  }));
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("swiglu");
  return ok_status();
}

Status swiglu_stacked(const Tensor& gate_up, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(gate_up, DataType::kFP32, "swiglu_stacked input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda_float_type(out, "swiglu_stacked output"));
  if (gate_up.ndim() != 2 || out.ndim() != 2 || gate_up.dim(0) != out.dim(0) || gate_up.dim(1) != 2 * out.dim(1)) {
    return invalid_argument("swiglu_stacked needs gate|up rows twice as wide as the output's, got " +
                            gate_up.describe() + " -> " + out.describe());
  }
  const int64_t n = out.dim(1), total = out.numel();
  KUIPER_RETURN_IF_ERROR(dispatch_float_type(out.dtype(), [&](auto zero) {
    using Out = decltype(zero);
    // Every row's halves start 16-byte aligned exactly when the first up half does (n a
    // multiple of 4).
    const float* in = gate_up.data<float>();
    launch_by_width(total, {in, in + n, out.raw_data()}, [&](auto width, unsigned blocks) {
      swiglu_stacked_kernel<width()><<<blocks, kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
          in, static_cast<Out*>(out.raw_data()), n, total);
    });
    return ok_status();
  }));
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("swiglu_stacked");
  return ok_status();
}

Status add(const Tensor& a, const Tensor& b, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(check_operands(a, b, out, "add"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kFP32, "add output"));
  const int64_t n = out.numel();
  launch_by_width(n, {a.raw_data(), b.raw_data(), out.raw_data()}, [&](auto width, unsigned blocks) {
    add_kernel<width()><<<blocks, kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
        a.data<float>(), b.data<float>(), out.data<float>(), n);
  });
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("add");
  return ok_status();
}

Status add_bias(Tensor& x, const Tensor& bias, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(x, DataType::kFP32, "add_bias input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(bias, DataType::kFP32, "bias"));
  const int64_t n = bias.numel(), total = x.numel();
  if (n == 0 || total % n != 0) {
    return invalid_argument("bias " + bias.describe() + " does not fit rows of " + x.describe());
  }
  add_bias_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, as_cuda_stream(ctx.stream())>>>(
      x.data<float>(), bias.data<float>(), n, total);
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("add_bias");
  return ok_status();
}

Status argmax(const Tensor& logits, Tensor& out, const ExecutionContext& ctx) {
  KUIPER_RETURN_IF_ERROR(expect_cuda(logits, DataType::kFP32, "argmax input"));
  KUIPER_RETURN_IF_ERROR(expect_cuda(out, DataType::kINT32, "argmax output"));
  const int64_t rows = out.numel();
  if (logits.numel() == 0 || rows == 0 || rows > INT32_MAX || logits.numel() % rows != 0 ||
      logits.numel() / rows > INT32_MAX) {
    return invalid_argument("argmax of " + logits.describe() + " into " + out.describe() +
                            ": needs rows of logits, one output slot each");
  }
  argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, as_cuda_stream(ctx.stream())>>>(
      logits.data<float>(), static_cast<int>(logits.numel() / rows), out.data<int32_t>());
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("argmax");
  return ok_status();
}

}  // namespace kuiper::op::cuda
