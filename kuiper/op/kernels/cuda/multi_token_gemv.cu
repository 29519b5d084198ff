// The multi-token GEMV for int8 and int4 weights (batched decode: a few sequences, one token
// each): the decode GEMV's warp kernel with TokenChunks, which multiplies each weight load with
// the int8-quantized x of up to 8 tokens (decode_gemv_int8_input_rows.cuh says why in
// integers). x is quantized once per call by quantize_tokens_kernel into the context's GEMM
// input scratch; more tokens than a tile holds take several token tiles of blocks, each reading
// the weights again (dequantized_gemm.cuh, kMultiTokenGemvMaxTokens, has the byte counts).
#include "kuiper/base/cuda_utils.h"
#include "kuiper/op/kernels/cuda/decode_gemv_int8_input_rows.cuh"
#include "kuiper/op/kernels/cuda/decode_gemv_warp_kernel.cuh"
#include "kuiper/op/kernels/cuda/dequantized_gemm.cuh"

namespace kuiper::op::cuda {
namespace {

// Two rows per warp, one unit of 32 weights per lane and burst: at 8 tokens a warp already
// holds 16 sums and the units' split words, and 4096-row matrices get 256 blocks of 16 rows to
// spread over 132 multiprocessors. Two int4 units per burst spilled 504 bytes at 8 tokens
// (ptxas hoists every token's input loads), within the 128 registers of two blocks per
// multiprocessor.
constexpr int kMultiTokenRows = 2;

template <typename Weights, int kTokens>
cudaError_t launch_tile_size(const DecodeGemvArgs& a, cudaStream_t stream) {
  using Rows = TokenChunks<Weights, kMultiTokenRows, 1, kTokens>;
  return launch_decode_gemv<Rows, GemvEpilogue::kStore, false>(a, stream);
}

// Tiles of 2, 4 or 8 tokens: the smallest that holds all of them, else 8 (llama.cpp's mmvq
// stops at 8 too). While the weights stream, a tile's unused tokens cost only multiplies.
template <typename Weights>
cudaError_t launch_tiles(const DecodeGemvArgs& a, cudaStream_t stream) {
  if (a.tokens <= 2) return launch_tile_size<Weights, 2>(a, stream);
  if (a.tokens <= 4) return launch_tile_size<Weights, 4>(a, stream);
  return launch_tile_size<Weights, 8>(a, stream);
}

}  // namespace

bool multi_token_gemv_fits(const Tensor& in, const Weight& weight) {
  return weight.cols() % kInt8InputBlock == 0 && weight.group_size >= kInt8InputBlock &&
         chunk_group_shift(weight.group_size) >= 0 && aligned_to(weight.values.raw_data(), 16) &&
         aligned_to(in.raw_data(), 16);
}

Status multi_token_gemv(const Tensor& in, const Weight& weight, Tensor& out, const ExecutionContext& ctx) {
  DecodeGemvArgs a;
  a.w = weight.values.raw_data();
  set_weight_groups(a, weight);
  a.x = in.data<float>();
  a.rows = static_cast<int>(weight.rows());
  a.cols = static_cast<int>(weight.cols());
  a.out = out.data<float>();
  a.tokens = static_cast<int>(in.numel() / a.cols);
  KUIPER_ASSIGN_OR_RETURN(void* quantized,
                          ctx.scratch(ScratchUse::kGemmInput, quantized_tokens_bytes(a.tokens, a.cols)));
  a.x_int8 = quantized;
  const cudaStream_t stream = as_cuda_stream(ctx.stream());
  const dim3 quantize_grid((a.cols / 4 + kQuantizeThreads - 1) / kQuantizeThreads, a.tokens);
  KUIPER_CUDA_RETURN_IF_ERROR(launch_overlapped(quantize_tokens_kernel, quantize_grid, dim3(kQuantizeThreads), 0,
                                                stream, a.x, static_cast<uint4*>(quantized), a.cols));
  KUIPER_CUDA_RETURN_IF_ERROR(weight.dtype() == DataType::kINT8 ? launch_tiles<Int8Units>(a, stream)
                                                                : launch_tiles<Int4Units>(a, stream));
  KUIPER_CUDA_RETURN_IF_LAUNCH_FAILED("multi-token gemv");
  return ok_status();
}

}  // namespace kuiper::op::cuda
