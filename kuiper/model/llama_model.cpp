#include "kuiper/model/llama_model.h"

#include <algorithm>
#include <cmath>

#include "kuiper/model/weight_convert.h"

namespace kuiper {
namespace {

bool is_half(DataType d) { return d == DataType::kFP16 || d == DataType::kBF16; }

// cos/sin of position × inverse frequency for every position the cache can hold.
Status make_rope_tables(const LlamaConfig& config, int positions, Tensor& cos, Tensor& sin) {
  const std::vector<float> inv_freq = rope_inverse_frequencies(config);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  KUIPER_ASSIGN_OR_RETURN(cos, Tensor::empty(DataType::kFP32, {positions, half}, cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(sin, Tensor::empty(DataType::kFP32, {positions, half}, cpu_allocator()));
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];  // fp32, as the references do
      cos.data<float>()[p * half + i] = std::cos(angle);
      sin.data<float>()[p * half + i] = std::sin(angle);
    }
  }
  return ok_status();
}

}  // namespace

LlamaModel::~LlamaModel() {
  decode_graph_.reset();
  // Buffers are released after this body; their memory returns to the pool, so the stream
  // may go first.
  if (stream_ != nullptr) {
    (void)synchronize(stream_);
    destroy_stream(stream_);
  }
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const Checkpoint& checkpoint,
                                                         const ModelOptions& options) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  KUIPER_RETURN_IF_ERROR(model->init(checkpoint, options));
  return model;
}

Status LlamaModel::init(const Checkpoint& checkpoint, const ModelOptions& options) {
  config_ = checkpoint.config;
  KUIPER_RETURN_IF_ERROR(config_.validate());
  device_ = options.device;
  if (device_ == DeviceType::kCUDA && !cuda_available()) return unsupported(cuda_unavailable_reason());
  KUIPER_ASSIGN_OR_RETURN(allocator_, allocator_for(device_));

  if (options.context < 0) return invalid_argument("context length must be positive");
  context_ = options.context == 0 ? std::min(config_.max_seq_len, ModelOptions::kDefaultContext)
                                  : options.context;
  if (context_ > config_.max_seq_len) {
    return invalid_argument("context " + std::to_string(context_) + " exceeds the model's maximum of " +
                            std::to_string(config_.max_seq_len) + " positions");
  }
  if (options.max_batch <= 0) return invalid_argument("max_batch must be positive");
  max_batch_ = std::min(options.max_batch, context_);

  const DataType stored = checkpoint.weights.layers.front().wq.dtype();
  weight_dtype_ = options.weight_dtype.value_or(device_ == DeviceType::kCUDA && !is_half(stored)
                                                    ? DataType::kBF16 : stored);
  // The CPU attention kernel reads an fp32 cache. On the GPU a half-precision model keeps a
  // cache of its own precision and an int8 one a bf16 cache (half the memory traffic); only
  // fp32 weights keep an fp32 cache, so that the fp32 path stays exact.
  if (device_ == DeviceType::kCPU || weight_dtype_ == DataType::kFP32) {
    kv_dtype_ = DataType::kFP32;
  } else {
    kv_dtype_ = is_half(weight_dtype_) ? weight_dtype_ : DataType::kBF16;
  }

  if (device_ == DeviceType::kCUDA) {
    KUIPER_RETURN_IF_ERROR(check_device_memory());
    KUIPER_ASSIGN_OR_RETURN(stream_, create_stream(device_));
    use_graph_ = options.use_cuda_graph;
  }
  // Where the device's table has the fused kernels (CUDA), the weights are stacked for them:
  // a copy, which the GPU needs anyway. The CPU table has none, so its fp32 weights stay
  // zero-copy views of the mapped file.
  const op::KernelTable& table = op::kernel_table(device_);
  fused_ = table.decode_gemv[static_cast<int>(weight_dtype_)] != nullptr && table.rope_kv_store != nullptr;
  matmul_input_dtype_ = table.matmul_input[static_cast<int>(weight_dtype_)];

  const LlamaWeights& w = checkpoint.weights;
  Allocator& alloc = *allocator_;
  const auto matmul = [&](const std::string& name, const op::Weight& weight) -> StatusOr<op::MatMul> {
    KUIPER_ASSIGN_OR_RETURN(op::Weight placed, convert_weight(weight, weight_dtype_, alloc));
    return op::MatMul(name, std::move(placed));
  };
  // Stacks `parts` into one matrix; `views` receive the parts back as row views into it.
  const auto stacked = [&](const std::string& name, std::initializer_list<op::Weight> parts,
                           std::initializer_list<std::pair<std::string, op::MatMul*>> views) -> StatusOr<op::MatMul> {
    KUIPER_ASSIGN_OR_RETURN(op::Weight whole, stack_rows(std::vector<op::Weight>(parts), weight_dtype_, alloc));
    int64_t row = 0;
    auto part = parts.begin();
    for (const auto& [view_name, view] : views) {
      KUIPER_ASSIGN_OR_RETURN(op::Weight rows, whole.slice_rows(row, row + part->rows()));
      row += (part++)->rows();
      *view = op::MatMul(view_name, std::move(rows));
    }
    return op::MatMul(name, std::move(whole));
  };
  const auto norm = [&](const Tensor& weight) -> StatusOr<op::RmsNorm> {
    KUIPER_ASSIGN_OR_RETURN(Tensor placed, place_fp32(weight, alloc));
    return op::RmsNorm(std::move(placed), config_.norm_eps);
  };

  layers_.resize(config_.n_layers);
  for (int l = 0; l < config_.n_layers; ++l) {
    const LlamaLayerWeights& src = w.layers[l];
    Layer& dst = layers_[l];
    const std::string prefix = "layer " + std::to_string(l) + " ";
    KUIPER_ASSIGN_OR_RETURN(dst.attention_norm, norm(src.attention_norm));
    KUIPER_ASSIGN_OR_RETURN(dst.ffn_norm, norm(src.ffn_norm));
    if (fused_) {
      KUIPER_ASSIGN_OR_RETURN(dst.wqkv, stacked(prefix + "wqkv", {src.wq, src.wk, src.wv},
                                                {{prefix + "wq", &dst.wq}, {prefix + "wk", &dst.wk}, {prefix + "wv", &dst.wv}}));
      KUIPER_ASSIGN_OR_RETURN(dst.w13, stacked(prefix + "w13", {src.w1, src.w3},
                                               {{prefix + "w1", &dst.w1}, {prefix + "w3", &dst.w3}}));
    } else {
      KUIPER_ASSIGN_OR_RETURN(dst.wq, matmul(prefix + "wq", src.wq));
      KUIPER_ASSIGN_OR_RETURN(dst.wk, matmul(prefix + "wk", src.wk));
      KUIPER_ASSIGN_OR_RETURN(dst.wv, matmul(prefix + "wv", src.wv));
      KUIPER_ASSIGN_OR_RETURN(dst.w1, matmul(prefix + "w1", src.w1));
      KUIPER_ASSIGN_OR_RETURN(dst.w3, matmul(prefix + "w3", src.w3));
    }
    KUIPER_ASSIGN_OR_RETURN(dst.wo, matmul(prefix + "wo", src.wo));
    KUIPER_ASSIGN_OR_RETURN(dst.w2, matmul(prefix + "w2", src.w2));
  }
  KUIPER_ASSIGN_OR_RETURN(final_norm_, norm(w.final_norm));
  KUIPER_ASSIGN_OR_RETURN(classifier_, matmul("classifier", w.classifier));
  if (config_.shared_classifier) {
    embedding_ = op::Embedding(classifier_.weight());  // one copy serves both
  } else {
    KUIPER_ASSIGN_OR_RETURN(op::Weight table, convert_weight(w.token_embedding, weight_dtype_, alloc));
    embedding_ = op::Embedding(std::move(table));
  }

  Tensor cos, sin;
  KUIPER_RETURN_IF_ERROR(make_rope_tables(config_, context_, cos, sin));
  KUIPER_ASSIGN_OR_RETURN(cos, place_fp32(cos, alloc));
  KUIPER_ASSIGN_OR_RETURN(sin, place_fp32(sin, alloc));
  rope_ = op::Rope(std::move(cos), std::move(sin), config_.head_dim());
  attention_ = op::Attention({config_.n_heads, config_.n_kv_heads, config_.head_dim()});
  return allocate_buffers();
}

Status LlamaModel::check_device_memory() const {
  const LlamaConfig& c = config_;
  const int64_t dim = c.dim, kv = c.kv_dim(), q_dim = int64_t{c.n_heads} * c.head_dim();
  const int64_t matrix_elements =
      int64_t{c.n_layers} * (dim * q_dim * 2 + dim * kv * 2 + dim * c.hidden_dim * 3) +
      int64_t{c.vocab_size} * dim * (c.shared_classifier ? 1 : 2);
  size_t needed = static_cast<size_t>(matrix_elements) * dtype_size(weight_dtype_);
  if (weight_dtype_ == DataType::kINT8) needed += matrix_elements / 8;  // scales, generous
  needed += 2 * static_cast<size_t>(c.n_layers) * context_ * kv * dtype_size(kv_dtype_);
  needed += static_cast<size_t>(max_batch_) * (4 * dim + 3 * q_dim + 2 * kv + 2 * c.hidden_dim + c.vocab_size) * 4;
  needed += static_cast<size_t>(max_batch_) * (dim + c.hidden_dim) * dtype_size(matmul_input_dtype_);
  KUIPER_ASSIGN_OR_RETURN(DeviceMemoryInfo info, cuda_memory_info());
  if (needed > info.free_bytes) {
    return resource_exhausted(
        "the model needs about " + std::to_string(needed >> 20) + " MiB of GPU memory (weights in " +
        std::string(dtype_name(weight_dtype_)) + ", KV cache for " + std::to_string(context_) +
        " positions) but only " + std::to_string(info.free_bytes >> 20) +
        " MiB are free; lower --context or use a smaller --dtype");
  }
  return ok_status();
}

Status LlamaModel::allocate_buffers() {
  Allocator& alloc = *allocator_;
  const int64_t layers = config_.n_layers, kv = config_.kv_dim();
  KUIPER_ASSIGN_OR_RETURN(k_cache_, Tensor::empty(kv_dtype_, {layers, context_, kv}, alloc));
  KUIPER_ASSIGN_OR_RETURN(v_cache_, Tensor::empty(kv_dtype_, {layers, context_, kv}, alloc));
  for (int l = 0; l < config_.n_layers; ++l) {
    KUIPER_ASSIGN_OR_RETURN(layers_[l].k_cache, k_cache_.select(l));
    KUIPER_ASSIGN_OR_RETURN(layers_[l].v_cache, v_cache_.select(l));
  }

  const int64_t rows = max_batch_, dim = config_.dim, q_dim = int64_t{config_.n_heads} * config_.head_dim();
  const auto f32 = [&](Shape shape) { return Tensor::empty(DataType::kFP32, std::move(shape), alloc); };
  KUIPER_ASSIGN_OR_RETURN(full_.tokens, Tensor::empty(DataType::kINT32, {rows}, alloc));
  KUIPER_ASSIGN_OR_RETURN(full_.positions, Tensor::empty(DataType::kINT32, {rows}, alloc));
  KUIPER_ASSIGN_OR_RETURN(full_.x, f32({rows, dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.xb, f32({rows, dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.q, f32({rows, q_dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.attention, f32({rows, q_dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.k, f32({rows, kv}));
  KUIPER_ASSIGN_OR_RETURN(full_.v, f32({rows, kv}));
  KUIPER_ASSIGN_OR_RETURN(full_.hb, f32({rows, config_.hidden_dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.hb2, f32({rows, config_.hidden_dim}));
  if (matmul_input_dtype_ == DataType::kFP32) {
    full_.xn = full_.xb;
    full_.hn = full_.hb;
  } else {
    KUIPER_ASSIGN_OR_RETURN(full_.xn, Tensor::empty(matmul_input_dtype_, {rows, dim}, alloc));
    KUIPER_ASSIGN_OR_RETURN(full_.hn, Tensor::empty(matmul_input_dtype_, {rows, config_.hidden_dim}, alloc));
  }
  KUIPER_ASSIGN_OR_RETURN(logits_, f32({config_.vocab_size}));
  KUIPER_ASSIGN_OR_RETURN(decode_, activation_rows(1));
  if (fused_) {
    KUIPER_ASSIGN_OR_RETURN(decode_sumsq_, f32({op::decode_sumsq_runs(dim)}));
    KUIPER_ASSIGN_OR_RETURN(full_.qkv, f32({rows, q_dim + 2 * kv}));
  }
  host_staging_.resize(2 * static_cast<size_t>(max_batch_));
  return ok_status();
}

StatusOr<LlamaModel::Activations> LlamaModel::activation_rows(int rows) const {
  Activations a;
  KUIPER_ASSIGN_OR_RETURN(a.tokens, full_.tokens.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.positions, full_.positions.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.x, full_.x.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.xb, full_.xb.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.q, full_.q.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.attention, full_.attention.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.k, full_.k.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.v, full_.v.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.hb, full_.hb.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.hb2, full_.hb2.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.xn, full_.xn.slice(0, rows));
  KUIPER_ASSIGN_OR_RETURN(a.hn, full_.hn.slice(0, rows));
  if (!full_.qkv.is_empty()) {
    KUIPER_ASSIGN_OR_RETURN(a.qkv, full_.qkv.slice(0, rows));
  }
  return a;
}

size_t LlamaModel::weight_bytes() const {
  size_t bytes = embedding_.table().nbytes() / config_.vocab_size;  // one row is read
  for (const Layer& l : layers_) {
    for (const op::MatMul* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) bytes += m->weight().nbytes();
    bytes += l.attention_norm.weight().nbytes() + l.ffn_norm.weight().nbytes();
  }
  return bytes + final_norm_.weight().nbytes() + classifier_.weight().nbytes();
}

size_t LlamaModel::kv_cache_bytes() const { return k_cache_.nbytes() + v_cache_.nbytes(); }

Status LlamaModel::check_positions(size_t count, int start_pos) const {
  if (count == 0) return invalid_argument("forward needs at least one token");
  if (start_pos < 0 || static_cast<int64_t>(start_pos) + static_cast<int64_t>(count) > context_) {
    return out_of_range("positions " + std::to_string(start_pos) + ".." +
                        std::to_string(start_pos + static_cast<int64_t>(count) - 1) +
                        " do not fit in the context of " + std::to_string(context_) + " tokens");
  }
  return ok_status();
}

Status LlamaModel::upload_inputs(std::span<const int32_t> tokens, int start_pos, const Activations& a) {
  // The kernels read token ids and positions from device memory, so a recorded decode step
  // stays valid as they change.
  const int rows = static_cast<int>(tokens.size());
  std::copy(tokens.begin(), tokens.end(), host_staging_.begin());
  for (int i = 0; i < rows; ++i) host_staging_[max_batch_ + i] = start_pos + i;
  KUIPER_RETURN_IF_ERROR(copy_bytes(a.tokens.raw_data(), device_, host_staging_.data(),
                                    DeviceType::kCPU, rows * sizeof(int32_t), stream_));
  return copy_bytes(a.positions.raw_data(), device_, host_staging_.data() + max_batch_,
                    DeviceType::kCPU, rows * sizeof(int32_t), stream_);
}

Status LlamaModel::run_layers(const Activations& a) {
  Tensor x = a.x, xb = a.xb, xn = a.xn, q = a.q, k = a.k, v = a.v, att = a.attention, hb = a.hb,
         hb2 = a.hb2, hn = a.hn, qkv = a.qkv;
  KUIPER_RETURN_IF_ERROR(embedding_.forward(a.tokens, x, stream_));
  // Each residual add is fused into the norm after it; xb carries the pending residual. The
  // norms and swiglu write the matmul inputs (xn, hn) in the matmuls' input dtype.
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    if (l == 0) {
      KUIPER_RETURN_IF_ERROR(layer.attention_norm.forward(x, xn, stream_));
    } else {
      KUIPER_RETURN_IF_ERROR(layer.attention_norm.forward_residual(x, xb, xn, stream_));
    }
    if (fused_) {
      KUIPER_RETURN_IF_ERROR(layer.wqkv.forward(xn, qkv, stream_));
      KUIPER_RETURN_IF_ERROR(rope_.forward_stacked(qkv, a.positions, q, layer.k_cache, layer.v_cache, stream_));
      KUIPER_RETURN_IF_ERROR(attention_.attend(q, a.positions, layer.k_cache, layer.v_cache, att, stream_));
    } else {
      KUIPER_RETURN_IF_ERROR(layer.wq.forward(xn, q, stream_));
      KUIPER_RETURN_IF_ERROR(layer.wk.forward(xn, k, stream_));
      KUIPER_RETURN_IF_ERROR(layer.wv.forward(xn, v, stream_));
      KUIPER_RETURN_IF_ERROR(rope_.forward(q, k, a.positions, stream_));
      KUIPER_RETURN_IF_ERROR(attention_.forward(q, k, v, a.positions, layer.k_cache, layer.v_cache, att, stream_));
    }
    KUIPER_RETURN_IF_ERROR(layer.wo.forward(att, xb, stream_));
    KUIPER_RETURN_IF_ERROR(layer.ffn_norm.forward_residual(x, xb, xn, stream_));
    KUIPER_RETURN_IF_ERROR(layer.w1.forward(xn, hb, stream_));
    KUIPER_RETURN_IF_ERROR(layer.w3.forward(xn, hb2, stream_));
    KUIPER_RETURN_IF_ERROR(op::swiglu(hb, hb2, hn, stream_));
    KUIPER_RETURN_IF_ERROR(layer.w2.forward(hn, xb, stream_));
  }
  return op::add(x, xb, x, stream_);
}

Status LlamaModel::classify(const Activations& a, int first, int count, Tensor& logits) {
  KUIPER_ASSIGN_OR_RETURN(Tensor x, a.x.slice(first, first + count));
  KUIPER_ASSIGN_OR_RETURN(Tensor xb, a.xb.slice(first, first + count));
  KUIPER_RETURN_IF_ERROR(final_norm_.forward(x, xb, stream_));
  return classifier_.forward(xb, logits, stream_);
}

Status LlamaModel::decode_step() {
  if (fused_) return fused_decode_step();
  KUIPER_RETURN_IF_ERROR(run_layers(decode_));
  KUIPER_RETURN_IF_ERROR(final_norm_.forward(decode_.x, decode_.xb, stream_));
  return classifier_.forward(decode_.xb, logits_, stream_);
}

Status LlamaModel::fused_decode_step() {
  Activations& a = decode_;
  // Each residual add hands the next norm on (kernel_table.h): x · g goes to xb and the sums of
  // squares of x to decode_sumsq_, and the GEMV reading xb applies 1 / rms(x).
  const auto add_to_residual = [&](const Tensor& in, const op::RmsNorm& next_norm) {
    op::DecodeGemv gemv;
    gemv.in = &in;
    gemv.epilogue = op::GemvEpilogue::kAccumulate;
    gemv.out = &a.x;
    gemv.next_norm_weight = &next_norm.weight();
    gemv.next_normed = &a.xb;
    gemv.next_sumsq = &decode_sumsq_;
    return gemv;
  };
  const auto normed = [&](const op::RmsNorm& norm, op::GemvEpilogue epilogue, Tensor& out) {
    op::DecodeGemv gemv;
    gemv.in = &a.xb;
    gemv.in_sumsq = &decode_sumsq_;
    gemv.norm_eps = norm.eps();
    gemv.epilogue = epilogue;
    gemv.out = &out;
    return gemv;
  };
  KUIPER_RETURN_IF_ERROR(embedding_.forward(a.tokens, a.x, stream_));
  // No GEMV comes before the first norm: it runs on its own, and the first q/k/v GEMV reads
  // its finished output.
  KUIPER_RETURN_IF_ERROR(layers_.front().attention_norm.forward(a.x, a.xb, stream_));
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    op::DecodeGemv qkv = normed(layer.attention_norm, op::GemvEpilogue::kRopeKv, a.q);
    if (l == 0) qkv.in_sumsq = nullptr;
    qkv.rope_kv = rope_.target(a.positions, static_cast<int>(a.q.numel()), layer.k_cache, layer.v_cache);
    KUIPER_RETURN_IF_ERROR(layer.wqkv.forward_decode(qkv, stream_));
    KUIPER_RETURN_IF_ERROR(attention_.attend(a.q, a.positions, layer.k_cache, layer.v_cache, a.attention, stream_));
    KUIPER_RETURN_IF_ERROR(layer.wo.forward_decode(add_to_residual(a.attention, layer.ffn_norm), stream_));
    KUIPER_RETURN_IF_ERROR(layer.w13.forward_decode(normed(layer.ffn_norm, op::GemvEpilogue::kSwiglu, a.hb), stream_));
    const op::RmsNorm& next_norm = l + 1 < layers_.size() ? layers_[l + 1].attention_norm : final_norm_;
    KUIPER_RETURN_IF_ERROR(layer.w2.forward_decode(add_to_residual(a.hb, next_norm), stream_));
  }
  return classifier_.forward_decode(normed(final_norm_, op::GemvEpilogue::kStore, logits_), stream_);
}

StatusOr<Tensor> LlamaModel::forward(std::span<const int32_t> tokens, int start_pos) {
  KUIPER_RETURN_IF_ERROR(check_positions(tokens.size(), start_pos));
  if (tokens.size() == 1) {
    KUIPER_RETURN_IF_ERROR(upload_inputs(tokens, start_pos, decode_));
    // The first decode runs eagerly so that kernels create their lazily sized scratch buffers
    // and handles; the second is recorded, and every later one replays the recording.
    if (!use_graph_ || eager_decodes_ < 1) {
      ++eager_decodes_;
      KUIPER_RETURN_IF_ERROR(decode_step());
      return logits_;
    }
    if (decode_graph_ == nullptr) {
      KUIPER_ASSIGN_OR_RETURN(decode_graph_, capture_graph(stream_, [this] { return decode_step(); }));
    }
    KUIPER_RETURN_IF_ERROR(decode_graph_->launch(stream_));
    return logits_;
  }
  int rows = 0;
  Activations acts;
  for (size_t done = 0; done < tokens.size(); done += rows) {
    rows = static_cast<int>(std::min<size_t>(max_batch_, tokens.size() - done));
    KUIPER_ASSIGN_OR_RETURN(acts, activation_rows(rows));
    KUIPER_RETURN_IF_ERROR(upload_inputs(tokens.subspan(done, rows), start_pos + static_cast<int>(done), acts));
    KUIPER_RETURN_IF_ERROR(run_layers(acts));
  }
  KUIPER_RETURN_IF_ERROR(classify(acts, rows - 1, 1, logits_));
  return logits_;
}

StatusOr<Tensor> LlamaModel::forward_all(std::span<const int32_t> tokens, int start_pos) {
  KUIPER_RETURN_IF_ERROR(check_positions(tokens.size(), start_pos));
  const int64_t vocab = config_.vocab_size, total = static_cast<int64_t>(tokens.size());
  KUIPER_ASSIGN_OR_RETURN(Tensor all, Tensor::empty(DataType::kFP32, {total, vocab}, cpu_allocator()));
  KUIPER_ASSIGN_OR_RETURN(Tensor chunk_logits, Tensor::empty(DataType::kFP32, {max_batch_, vocab}, *allocator_));
  for (int64_t done = 0; done < total;) {
    const int rows = static_cast<int>(std::min<int64_t>(max_batch_, total - done));
    KUIPER_ASSIGN_OR_RETURN(Activations acts, activation_rows(rows));
    KUIPER_RETURN_IF_ERROR(upload_inputs(tokens.subspan(done, rows), start_pos + static_cast<int>(done), acts));
    KUIPER_RETURN_IF_ERROR(run_layers(acts));
    KUIPER_ASSIGN_OR_RETURN(Tensor logits, chunk_logits.slice(0, rows));
    KUIPER_RETURN_IF_ERROR(classify(acts, 0, rows, logits));
    KUIPER_ASSIGN_OR_RETURN(Tensor dst, all.slice(done, done + rows));
    KUIPER_RETURN_IF_ERROR(dst.copy_from(logits, stream_));
    done += rows;
  }
  KUIPER_RETURN_IF_ERROR(synchronize(stream_));
  return all;
}

}  // namespace kuiper
