#include "kuiper/model/llama_model.h"

#include <algorithm>
#include <cmath>

#include <glog/logging.h>

#include "kuiper/model/dequantize.h"
#include "kuiper/model/float_convert.h"
#include "kuiper/model/weight_convert.h"
#include "kuiper/op/kernel_shapes.h"
#include "kuiper/parallel/rank_threads.h"

namespace kuiper {
namespace {

bool is_half(DataType d) { return d == DataType::kFP16 || d == DataType::kBF16; }
bool is_quantized(DataType d) { return d == DataType::kINT8 || d == DataType::kINT4; }

// The dtype a matrix stored so runs in when no dtype is asked: its own, on the kernels of its
// type, except that CUDA runs fp32 in bf16 (its tensor cores' precision).
DataType as_stored(DataType stored, DeviceType device) {
  return device == DeviceType::kCUDA && stored == DataType::kFP32 ? DataType::kBF16 : stored;
}

// The dtype a stored matrix runs in: as_stored where the model runs matrices as stored (no dtype
// asked), else the model's, except that quantized matrices stay as stored under a quantized
// model dtype, since requantizing int4 to int8 only adds bytes and int8 to int4 only adds error.
DataType matrix_dtype(const op::Weight& stored, DataType model_dtype, bool matrices_as_stored, DeviceType device) {
  if (matrices_as_stored) return as_stored(stored.dtype(), device);
  return is_quantized(stored.dtype()) && is_quantized(model_dtype) ? stored.dtype() : model_dtype;
}

// `part` quantized as `like` (the first part of its stack, already in the model's dtype), saying
// on stderr what requantizing cost: a stacked matrix has one quantization, and GGUF Q4_K_M
// stores some v rows as Q6_K (int8, groups of 16) beside Q4_K q and k rows (int4, groups of 32).
StatusOr<op::Weight> requantized_part(const std::string& name, const op::Weight& part, const op::Weight& like) {
  KUIPER_ASSIGN_OR_RETURN(op::Weight converted, quantize_like(part, like));
  if (part.is_quantized() && !same_quantization(part, like)) {
    KUIPER_ASSIGN_OR_RETURN(Tensor original, dequantize_weight(part));
    KUIPER_ASSIGN_OR_RETURN(double error, max_quantization_error(original, converted));
    double largest = 0;
    for (int64_t i = 0; i < original.numel(); ++i) largest = std::max(largest, double{std::fabs(original.data<float>()[i])});
    LOG(WARNING) << name << ": requantized from " << dtype_name(part.dtype()) << " (groups of " << part.group_size
                 << ") to " << dtype_name(like.dtype()) << " (groups of " << like.group_size
                 << ") to share one matrix; largest added error " << error << " ("
                 << (largest > 0 ? 100 * error / largest : 0) << "% of the largest weight)";
  }
  return converted;
}

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

struct LlamaModel::RankGroup {
  std::vector<std::unique_ptr<parallel::Communicator>> comms;  // one per rank
  std::unique_ptr<parallel::RankThreads> threads;
  // By rank; rank 0's is handed to the caller once every rank's is made.
  std::vector<std::unique_ptr<LlamaModel>> models;

  ~RankGroup() {
    // Each rank's model goes on its own thread (its GPU), before the communicators its
    // recorded graph uses.
    if (threads == nullptr) return;
    (void)threads->run([this](int rank) {
      models[rank].reset();
      return ok_status();
    });
  }
};

LlamaModel::LlamaModel() = default;

LlamaModel::~LlamaModel() {
  // The graphs go before the context whose stream and scratch they use; buffers are released
  // after this body, once the context has waited for its work.
  decode_graphs_.clear();
  if (ctx_ != nullptr) (void)synchronize(ctx_->stream());
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const LlamaConfig& config, const LlamaWeights& weights,
                                                         const ModelOptions& options) {
  const int ranks = options.tensor_parallel;
  if (ranks == 1) return create_rank(config, weights, options, ParallelPlan{});
  KUIPER_RETURN_IF_ERROR(config.validate());
  KUIPER_RETURN_IF_ERROR(ParallelPlan::check(config, ranks));  // before any device is touched
  auto group = std::make_unique<RankGroup>();
  KUIPER_ASSIGN_OR_RETURN(group->comms, parallel::make_communicators(options.device, ranks));
  KUIPER_ASSIGN_OR_RETURN(group->threads, parallel::RankThreads::start(options.device, ranks));
  group->models.resize(ranks);
  KUIPER_RETURN_IF_ERROR(group->threads->run([&](int rank) -> Status {
    KUIPER_ASSIGN_OR_RETURN(ParallelPlan plan, ParallelPlan::make(config, *group->comms[rank]));
    KUIPER_ASSIGN_OR_RETURN(LlamaWeights mine, plan.rank_weights(config, weights, cpu_allocator()));
    KUIPER_ASSIGN_OR_RETURN(group->models[rank], create_rank(config, mine, options, plan));
    return ok_status();
  }));
  std::unique_ptr<LlamaModel> model = std::move(group->models[0]);
  model->group_ = std::move(group);
  return model;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create_rank(const LlamaConfig& config, const LlamaWeights& weights,
                                                              const ModelOptions& options, const ParallelPlan& plan) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  model->whole_config_ = config;
  model->plan_ = plan;
  KUIPER_RETURN_IF_ERROR(model->init(plan.rank_config(config), weights, options));
  return model;
}

Status LlamaModel::init(const LlamaConfig& config, const LlamaWeights& weights, const ModelOptions& options) {
  config_ = config;
  KUIPER_RETURN_IF_ERROR(config_.validate());
  if (options.tensor_parallel < 1) return invalid_argument("tensor_parallel must be at least 1");
  device_ = options.device;
  if (options.observe_inputs && (device_ != DeviceType::kCPU || options.tensor_parallel > 1)) {
    return invalid_argument("matrix inputs can be observed on the CPU without tensor parallelism only");
  }
  observe_inputs_ = options.observe_inputs;
  if (device_ == DeviceType::kCUDA && !cuda_available()) return unsupported(cuda_unavailable_reason());

  if (options.context < 0) return invalid_argument("context length must be positive");
  // By default at most kDefaultContext positions, and no more than a sliding window spans.
  int default_context = std::min(config_.max_seq_len, ModelOptions::kDefaultContext);
  if (config_.sliding_window > 0) default_context = std::min(default_context, config_.sliding_window);
  context_ = options.context == 0 ? default_context : options.context;
  if (context_ > config_.max_seq_len) {
    return invalid_argument("context " + std::to_string(context_) + " exceeds the model's maximum of " +
                            std::to_string(config_.max_seq_len) + " positions");
  }
  if (config_.sliding_window > 0 && context_ > config_.sliding_window) {
    // Within the window every position sees all earlier ones, as without a window.
    return unsupported("this model attends over a sliding window of " + std::to_string(config_.sliding_window) +
                       " positions, which kuiper does not implement yet; use a context of at most " +
                       std::to_string(config_.sliding_window) + " (-c " + std::to_string(config_.sliding_window) + ")");
  }
  if (options.max_batch <= 0) return invalid_argument("max_batch must be positive");
  // One sequence never runs more rows than its context; a paged step's rows come from several.
  max_batch_ = options.kv_block_size > 0 ? options.max_batch : std::min(options.max_batch, context_);
  if (options.kv_slots < 0 || options.kv_block_size < 0 || options.max_sequences <= 0) {
    return invalid_argument("kv_slots and kv_block_size must be >= 0 and max_sequences positive");
  }
  kv_slots_ = options.kv_slots == 0 ? context_ : options.kv_slots;
  kv_block_size_ = options.kv_block_size;
  max_sequences_ = options.max_sequences;
  if (kv_block_size_ > 0 && kv_slots_ % kv_block_size_ != 0) {
    return invalid_argument("a paged KV cache of " + std::to_string(kv_slots_) +
                            " slots is not a whole number of blocks of " + std::to_string(kv_block_size_));
  }
  if (kv_block_size_ > 0) max_table_width_ = (context_ + kv_block_size_ - 1) / kv_block_size_;

  const DataType stored = weights.layers.front().wq.dtype();
  // Unset: each matrix runs as stored (as_stored), and weight_dtype() reports wq's.
  matrices_as_stored_ = !options.weight_dtype;
  weight_dtype_ = options.weight_dtype.value_or(as_stored(stored, device_));
  // The CPU attention kernel reads an fp32 cache. On the GPU a half-precision model keeps a
  // cache of its own precision and an int8/int4 one a bf16 cache (half the memory traffic); only
  // fp32 weights keep an fp32 cache, so that the fp32 path stays exact.
  if (device_ == DeviceType::kCPU || weight_dtype_ == DataType::kFP32) {
    kv_dtype_ = DataType::kFP32;
  } else {
    kv_dtype_ = is_half(weight_dtype_) ? weight_dtype_ : DataType::kBF16;
  }
  // Where the device's table has the fused kernels (CUDA), the weights are stacked for them:
  // a copy, which the GPU needs anyway. The CPU table has none, so its fp32 weights stay
  // zero-copy views of the mapped file.
  const op::KernelTable& table = op::kernel_table(device_);
  // The fused kernels have no place for biases or per-head norms: such models run the kernels
  // one by one.
  fused_ = table.decode_gemv[static_cast<int>(weight_dtype_)] != nullptr && table.rope_kv_store != nullptr &&
           table.swiglu_stacked != nullptr && !config_.has_biases_or_head_norms();
  matmul_input_dtype_ = table.matmul_input[static_cast<int>(weight_dtype_)];

  if (device_ == DeviceType::kCUDA) {
    KUIPER_RETURN_IF_ERROR(check_device_memory());
    KUIPER_ASSIGN_OR_RETURN(multiprocessors_, cuda_multiprocessors());
    use_graph_ = options.use_cuda_graph;
  }
  // The weights first: the scratch plan is sized from the placed matrices.
  KUIPER_ASSIGN_OR_RETURN(ctx_, op::ExecutionContext::create(device_));
  KUIPER_RETURN_IF_ERROR(place_weights(weights));
  ctx_.reset();
  KUIPER_ASSIGN_OR_RETURN(ctx_, op::ExecutionContext::create(device_, scratch_plan()));
  return allocate_buffers();
}

Status LlamaModel::place_weights(const LlamaWeights& w) {
  if (w.layers.size() != static_cast<size_t>(config_.n_layers)) {
    return invalid_argument("the weights have " + std::to_string(w.layers.size()) +
                            " layers, the config " + std::to_string(config_.n_layers));
  }
  Allocator& alloc = ctx_->allocator();
  // A matrix that cannot be placed (say, a scale beyond the device's dtype) is named in the error.
  const auto named = [](const std::string& name, StatusOr<op::Weight> placed) -> StatusOr<op::Weight> {
    if (!placed.ok()) return Status(placed.status().code(), name + ": " + placed.status().message());
    return placed;
  };
  // A matrix on the device in the dtype it runs in (matrix_dtype).
  const auto placed = [&](const std::string& name, const op::Weight& weight) {
    return named(name, convert_weight(weight, matrix_dtype(weight, weight_dtype_, matrices_as_stored_, device_), alloc));
  };
  const auto matmul = [&](const std::string& name, const op::Weight& weight) -> StatusOr<op::MatMul> {
    KUIPER_ASSIGN_OR_RETURN(op::Weight on_device, placed(name, weight));
    return op::MatMul(name, std::move(on_device));
  };
  // Stacks `parts` into one matrix; `views` receive the parts back as row views into it.
  const auto stacked = [&](const std::string& name, std::initializer_list<op::Weight> parts,
                           std::initializer_list<std::pair<std::string, op::MatMul*>> views) -> StatusOr<op::MatMul> {
    std::vector<op::Weight> host;
    auto view = views.begin();
    for (const op::Weight& part : parts) {
      const std::string& part_name = (view++)->first;
      // Quantized parts after the first take its quantization.
      KUIPER_ASSIGN_OR_RETURN(op::Weight converted, host.empty() || !is_quantized(weight_dtype_)
                                                        ? convert_weight(part, weight_dtype_, cpu_allocator())
                                                        : requantized_part(part_name, part, host.front()));
      host.push_back(std::move(converted));
    }
    KUIPER_ASSIGN_OR_RETURN(op::Weight whole, named(name, stack_rows(host, weight_dtype_, alloc)));
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
    const auto vector = [&](const Tensor& v) -> StatusOr<Tensor> {
      return v.is_empty() ? StatusOr<Tensor>(Tensor()) : place_fp32(v, alloc);
    };
    for (auto [to, from] : {std::pair{&dst.bq, &src.bq}, {&dst.bk, &src.bk}, {&dst.bv, &src.bv}, {&dst.bo, &src.bo},
                            {&dst.b1, &src.b1}, {&dst.b2, &src.b2}, {&dst.b3, &src.b3}}) {
      KUIPER_ASSIGN_OR_RETURN(*to, vector(*from));
    }
    if (config_.qk_norm) {
      KUIPER_ASSIGN_OR_RETURN(dst.q_norm, norm(src.q_norm));
      KUIPER_ASSIGN_OR_RETURN(dst.k_norm, norm(src.k_norm));
    }
  }
  KUIPER_ASSIGN_OR_RETURN(final_norm_, norm(w.final_norm));
  // The classifier computes the logits of this rank's vocabulary rows (all of them on one rank).
  const auto [first_word, last_word] = plan_.vocab_rows(config_.vocab_size);
  if (config_.shared_classifier) {
    // One copy serves both: the embedding looks up any row, the classifier reads its own.
    KUIPER_ASSIGN_OR_RETURN(op::Weight table, placed("classifier", w.classifier));
    KUIPER_ASSIGN_OR_RETURN(op::Weight rows, table.slice_rows(first_word, last_word));
    classifier_ = op::MatMul("classifier", std::move(rows));
    embedding_ = op::Embedding(std::move(table));
  } else {
    KUIPER_ASSIGN_OR_RETURN(op::Weight rows, w.classifier.slice_rows(first_word, last_word));
    KUIPER_ASSIGN_OR_RETURN(classifier_, matmul("classifier", rows));
    KUIPER_ASSIGN_OR_RETURN(op::Weight table, placed("token embedding", w.token_embedding));
    embedding_ = op::Embedding(std::move(table));
  }

  Tensor cos, sin;
  KUIPER_RETURN_IF_ERROR(make_rope_tables(config_, context_, cos, sin));
  KUIPER_ASSIGN_OR_RETURN(cos, place_fp32(cos, alloc));
  KUIPER_ASSIGN_OR_RETURN(sin, place_fp32(sin, alloc));
  rope_ = op::Rope(std::move(cos), std::move(sin), config_.head_dim());
  attention_ = op::Attention({config_.n_heads, config_.n_kv_heads, config_.head_dim()});
  return ok_status();
}

op::ScratchPlan LlamaModel::scratch_plan() const {
  op::ScratchPlan plan;
  if (device_ != DeviceType::kCUDA) return plan;  // the CPU kernels borrow nothing
  const int64_t q_dim = int64_t{config_.n_heads} * config_.head_dim();
  const int64_t widest_input = std::max({int64_t{config_.dim}, q_dim, int64_t{config_.hidden_dim}});
  if (weight_dtype_ != DataType::kFP32) {
    // fp32 activations rounded to 16 bits for a prefill GEMM or for the int8/int4 tensor-core
    // GEMM of batched decode (quantized_mma.cu), or quantized to int8 (1.25 bytes an input,
    // multi_token_gemv.cu) for an int8/int4 batched-decode GEMV.
    plan[op::ScratchUse::kGemmInput] = static_cast<size_t>(max_batch_) * widest_input * sizeof(uint16_t);
  }
  if (weight_dtype_ == DataType::kINT8 || weight_dtype_ == DataType::kINT4) {
    // The largest quantized matrix, dequantized to bf16 for a prefill GEMM; batched decode's
    // tensor-core GEMM keeps its column splits' partial sums here (at most a matrix's bf16 size).
    int64_t largest = classifier_.weight().numel();
    for (const Layer& l : layers_) {
      for (const op::MatMul* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3, &l.wqkv, &l.w13}) {
        largest = std::max(largest, m->weight().numel());
      }
    }
    plan[op::ScratchUse::kDequantizedWeight] = static_cast<size_t>(largest) * sizeof(uint16_t);
  }
  const op::AttentionShape attention{config_.n_heads, config_.n_kv_heads, config_.head_dim()};
  size_t partials = op::decode_attention_partials_bytes(std::min(context_, kv_slots_), attention);
  if (kv_block_size_ > 0) {
    // forward_step's rows, each over a block table of at most max_table_width_ blocks.
    partials = std::max(partials, op::paged_attention_partials_bytes(
                                      max_batch_, int64_t{max_table_width_} * kv_block_size_, attention,
                                      multiprocessors_));
  }
  plan[op::ScratchUse::kAttentionPartials] = partials;
  if (fused_) {
    // x reaches a decode GEMV raw after the embedding (and after the ranks' sum); one that
    // cannot normalize it as it reads it normalizes it into here first
    // (DecodeGemv::in_norm_weight).
    plan[op::ScratchUse::kNormedInput] = static_cast<size_t>(config_.dim) * sizeof(float);
  }
  return plan;
}

Status LlamaModel::check_device_memory() const {
  const LlamaConfig& c = config_;
  const int64_t dim = c.dim, kv = c.kv_dim(), q_dim = int64_t{c.n_heads} * c.head_dim();
  const int64_t layer_elements = dim * q_dim * 2 + dim * kv * 2 + dim * c.hidden_dim * 3;
  const int64_t matrix_elements =
      int64_t{c.n_layers} * layer_elements + int64_t{c.vocab_size} * dim * (c.shared_classifier ? 1 : 2);
  // int4: half a byte a weight (dtype_size counts its bytes of two).
  size_t needed = static_cast<size_t>(matrix_elements) * dtype_size(weight_dtype_) /
                  (weight_dtype_ == DataType::kINT4 ? 2 : 1);
  if (weight_dtype_ == DataType::kINT8 || weight_dtype_ == DataType::kINT4) {
    needed += matrix_elements / 8;  // scales, generous
    // Scratch for the largest matrix dequantized to bf16 (scratch_plan).
    needed += static_cast<size_t>(std::max<int64_t>(layer_elements, int64_t{c.vocab_size} * dim)) * 2;
  }
  needed += 2 * static_cast<size_t>(c.n_layers) * kv_slots_ * kv * dtype_size(kv_dtype_);
  needed += static_cast<size_t>(max_batch_) * (4 * dim + 3 * q_dim + 2 * kv + 3 * c.hidden_dim + c.vocab_size) * 4;
  needed += static_cast<size_t>(max_batch_) * (dim + c.hidden_dim) * dtype_size(matmul_input_dtype_);
  KUIPER_ASSIGN_OR_RETURN(DeviceMemoryInfo info, cuda_memory_info());
  if (needed > info.free_bytes) {
    return resource_exhausted(
        "the model needs about " + std::to_string(needed >> 20) + " MiB of GPU memory (weights in " +
        std::string(dtype_name(weight_dtype_)) + ", KV cache for " + std::to_string(kv_slots_) +
        " positions) but only " + std::to_string(info.free_bytes >> 20) +
        " MiB are free; lower --context or use a smaller --dtype");
  }
  return ok_status();
}

Status LlamaModel::allocate_buffers() {
  Allocator& alloc = ctx_->allocator();
  const int64_t layers = config_.n_layers, kv = config_.kv_dim();
  KUIPER_ASSIGN_OR_RETURN(k_cache_, Tensor::empty(kv_dtype_, {layers, kv_slots_, kv}, alloc));
  KUIPER_ASSIGN_OR_RETURN(v_cache_, Tensor::empty(kv_dtype_, {layers, kv_slots_, kv}, alloc));
  for (int l = 0; l < config_.n_layers; ++l) {
    KUIPER_ASSIGN_OR_RETURN(layers_[l].k_cache, k_cache_.select(l));
    KUIPER_ASSIGN_OR_RETURN(layers_[l].k_positions, layers_[l].k_cache.slice(0, std::min(context_, kv_slots_)));
    KUIPER_ASSIGN_OR_RETURN(layers_[l].v_cache, v_cache_.select(l));
    KUIPER_ASSIGN_OR_RETURN(layers_[l].v_positions, layers_[l].v_cache.slice(0, std::min(context_, kv_slots_)));
  }

  const int64_t rows = max_batch_, dim = config_.dim, hidden = config_.hidden_dim;
  const int64_t q_dim = int64_t{config_.n_heads} * config_.head_dim();
  const auto f32 = [&](Shape shape) { return Tensor::empty(DataType::kFP32, std::move(shape), alloc); };
  const auto matmul_input = [&](Shape shape) { return Tensor::empty(matmul_input_dtype_, std::move(shape), alloc); };
  KUIPER_ASSIGN_OR_RETURN(full_.tokens, Tensor::empty(DataType::kINT32, {rows}, alloc));
  KUIPER_ASSIGN_OR_RETURN(full_.positions, Tensor::empty(DataType::kINT32, {rows}, alloc));
  if (kv_block_size_ > 0) {
    KUIPER_ASSIGN_OR_RETURN(full_.slots, Tensor::empty(DataType::kINT32, {rows}, alloc));
    KUIPER_ASSIGN_OR_RETURN(full_.row_sequence, Tensor::empty(DataType::kINT32, {rows}, alloc));
    KUIPER_ASSIGN_OR_RETURN(block_tables_,
                            Tensor::empty(DataType::kINT32, {int64_t{max_sequences_} * max_table_width_}, alloc));
    KUIPER_ASSIGN_OR_RETURN(picked_normed_, Tensor::empty(matmul_input_dtype_, {max_sequences_, dim}, alloc));
    KUIPER_ASSIGN_OR_RETURN(step_logits_,
                            Tensor::empty(DataType::kFP32, {max_sequences_, int64_t{config_.vocab_size}}, alloc));
  }
  // What the ranks sum (x in the fused decode step, delta in the batched ones) and gather
  // (rank_logits_ into logits_ or gathered_logits_) lives in the communicators' shared memory.
  KUIPER_ASSIGN_OR_RETURN(full_.x, plan_.collective_tensor({rows, dim}, alloc));
  KUIPER_ASSIGN_OR_RETURN(full_.normed, matmul_input({rows, dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.q, f32({rows, q_dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.attention, matmul_input({rows, q_dim}));
  KUIPER_ASSIGN_OR_RETURN(full_.delta, plan_.collective_tensor({rows, dim}, alloc));
  KUIPER_ASSIGN_OR_RETURN(full_.hidden, matmul_input({rows, hidden}));
  KUIPER_RETURN_IF_ERROR(plan_quantized_handoffs());
  if (fused_) {
    KUIPER_ASSIGN_OR_RETURN(full_.qkv, f32({rows, q_dim + 2 * kv}));
    KUIPER_ASSIGN_OR_RETURN(full_.gate_up, f32({rows, 2 * hidden}));
    KUIPER_ASSIGN_OR_RETURN(full_.swiglu, f32({1, hidden}));
    KUIPER_ASSIGN_OR_RETURN(full_.attention_fp32, f32({1, q_dim}));
    KUIPER_ASSIGN_OR_RETURN(handoff_.values, f32({dim}));
    KUIPER_ASSIGN_OR_RETURN(handoff_.sumsq, f32({op::decode_sumsq_runs(dim)}));
    // x of n values quantized (QuantizedHandoffs), where some layer hands it on through `buffer`.
    const auto quantized_x = [&](auto hands_on, int64_t n, Tensor& buffer) -> Status {
      if (std::none_of(quantized_handoffs_.begin(), quantized_handoffs_.end(), hands_on)) return ok_status();
      KUIPER_ASSIGN_OR_RETURN(buffer, Tensor::empty(DataType::kINT8, {op::decode_quantized_x_bytes(n)}, alloc));
      return ok_status();
    };
    KUIPER_RETURN_IF_ERROR(quantized_x([](const QuantizedHandoffs& h) { return h.wo || h.w2; }, dim, handoff_.quantized));
    KUIPER_RETURN_IF_ERROR(quantized_x([](const QuantizedHandoffs& h) { return h.w13; }, hidden, swiglu_quantized_));
    KUIPER_RETURN_IF_ERROR(
        quantized_x([](const QuantizedHandoffs& h) { return h.attention; }, q_dim, attention_quantized_));
  } else {
    KUIPER_ASSIGN_OR_RETURN(full_.k, f32({rows, kv}));
    KUIPER_ASSIGN_OR_RETURN(full_.v, f32({rows, kv}));
    KUIPER_ASSIGN_OR_RETURN(full_.gate, f32({rows, hidden}));
    KUIPER_ASSIGN_OR_RETURN(full_.up, f32({rows, hidden}));
  }
  if (plan_.split_vocab) {
    const int64_t mine = classifier_.weight().rows(), sequences = max_sequences_;
    KUIPER_ASSIGN_OR_RETURN(logits_, plan_.collective_tensor({config_.vocab_size}, alloc));
    KUIPER_ASSIGN_OR_RETURN(rank_logits_, plan_.collective_tensor({sequences, mine}, alloc));
    if (sequences > 1) {
      KUIPER_ASSIGN_OR_RETURN(gathered_logits_, plan_.collective_tensor({plan_.ranks * sequences * mine}, alloc));
    }
  } else {
    KUIPER_ASSIGN_OR_RETURN(logits_, f32({config_.vocab_size}));
  }
  KUIPER_ASSIGN_OR_RETURN(decode_, activation_rows(1));
  decode_.slots = decode_.positions;
  host_staging_.resize(2 * static_cast<size_t>(max_batch_));
  return ok_status();
}

StatusOr<LlamaModel::Activations> LlamaModel::activation_rows(int rows) const {
  const auto first = [rows](const Tensor& full) -> StatusOr<Tensor> {
    if (full.is_empty()) return Tensor();
    return full.slice(0, std::min<int64_t>(rows, full.dim(0)));
  };
  Activations a;
  for (auto member : {&Activations::tokens, &Activations::positions, &Activations::slots,
                      &Activations::row_sequence, &Activations::x, &Activations::normed,
                      &Activations::qkv, &Activations::q, &Activations::k, &Activations::v,
                      &Activations::attention, &Activations::attention_fp32, &Activations::delta,
                      &Activations::gate_up, &Activations::gate, &Activations::up, &Activations::hidden,
                      &Activations::swiglu}) {
    KUIPER_ASSIGN_OR_RETURN(a.*member, first(full_.*member));
  }
  return a;
}

size_t LlamaModel::weight_bytes() const {
  size_t bytes = rank_weight_bytes();
  if (group_ != nullptr) {
    for (const auto& peer : group_->models) {
      if (peer != nullptr) bytes += peer->rank_weight_bytes();  // rank 0 is this model
    }
  }
  return bytes;
}

size_t LlamaModel::rank_weight_bytes() const {
  size_t bytes = embedding_.table().nbytes() / config_.vocab_size;  // one row is read
  for (const Layer& l : layers_) {
    for (const op::MatMul* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) bytes += m->weight().nbytes();
    bytes += l.attention_norm.weight().nbytes() + l.ffn_norm.weight().nbytes();
  }
  return bytes + final_norm_.weight().nbytes() + classifier_.weight().nbytes();
}

Status LlamaModel::check_positions(size_t count, int start_pos) const {
  if (count == 0) return invalid_argument("forward needs at least one token");
  if (start_pos < 0 || static_cast<int64_t>(start_pos) + static_cast<int64_t>(count) > context_) {
    return out_of_range("positions " + std::to_string(start_pos) + ".." +
                        std::to_string(start_pos + static_cast<int64_t>(count) - 1) +
                        " do not fit in the context of " + std::to_string(context_) + " tokens");
  }
  return ok_status();
}

Status LlamaModel::upload_inputs(std::span<const int32_t> tokens, int start_pos, Activations& a) {
  // The kernels read token ids and positions from device memory, so a recorded decode step
  // stays valid as they change.
  const int rows = static_cast<int>(tokens.size());
  std::copy(tokens.begin(), tokens.end(), host_staging_.begin());
  for (int i = 0; i < rows; ++i) host_staging_[max_batch_ + i] = start_pos + i;
  KUIPER_RETURN_IF_ERROR(copy_bytes(a.tokens.raw_data(), device_, host_staging_.data(),
                                    DeviceType::kCPU, rows * sizeof(int32_t), ctx_->stream()));
  return copy_bytes(a.positions.raw_data(), device_, host_staging_.data() + max_batch_,
                    DeviceType::kCPU, rows * sizeof(int32_t), ctx_->stream());
}

Status LlamaModel::run_network(Activations& a, bool fused) {
  const op::ExecutionContext& ctx = *ctx_;
  KUIPER_RETURN_IF_ERROR(embedding_.forward(a.tokens, a.x, ctx));
  if (fused) {
    handoff_.form = NormHandoff::Form::kRaw;  // no GEMV wrote x: the first one normalizes it
  } else {
    KUIPER_RETURN_IF_ERROR(layers_.front().attention_norm.forward(a.x, a.normed, ctx));
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    const op::RmsNorm& next_norm = l + 1 < layers_.size() ? layers_[l + 1].attention_norm : final_norm_;
    KUIPER_RETURN_IF_ERROR(run_layer(layers_[l], next_norm, a, fused));
  }
  return ok_status();
}

Status LlamaModel::run_layer(Layer& layer, const op::RmsNorm& next_norm, Activations& a, bool fused) {
  const int index = static_cast<int>(&layer - layers_.data());
  KUIPER_RETURN_IF_ERROR(observe(index, MatrixInput::kAttention, a.normed, fused));
  KUIPER_RETURN_IF_ERROR(project_qkv(layer, a, fused));
  Tensor& attended = fused ? a.attention_fp32 : a.attention;
  const QuantizedHandoffs& quantized = quantized_handoffs_[index];
  Tensor* attended_quantized = fused && quantized.attention ? &attention_quantized_ : nullptr;
  Tensor k_cache = keys(layer, a), v_cache = values(layer, a);
  if (a.reach > 0) {
    KUIPER_ASSIGN_OR_RETURN(k_cache, k_cache.slice(0, a.reach));
    KUIPER_ASSIGN_OR_RETURN(v_cache, v_cache.slice(0, a.reach));
  }
  KUIPER_RETURN_IF_ERROR(
      attention_.attend(a.q, a.positions, k_cache, v_cache, a.paged, attended, *ctx_, attended_quantized));
  KUIPER_RETURN_IF_ERROR(observe(index, MatrixInput::kAttentionOutput, attended, fused));
  KUIPER_RETURN_IF_ERROR(add_to_residual(layer.wo, layer.bo, attended, layer.ffn_norm, a, fused, attended_quantized,
                                         fused && quantized.wo));
  KUIPER_RETURN_IF_ERROR(observe(index, MatrixInput::kFeedForward, a.normed, fused));
  Tensor* hidden_quantized = fused && quantized.w13 ? &swiglu_quantized_ : nullptr;
  KUIPER_RETURN_IF_ERROR(feed_forward(layer, a, fused, hidden_quantized));
  KUIPER_RETURN_IF_ERROR(observe(index, MatrixInput::kFeedForwardHidden, a.hidden, fused));
  return add_to_residual(layer.w2, layer.b2, fused ? a.swiglu : a.hidden, next_norm, a, fused, hidden_quantized,
                         fused && quantized.w2);
}

Status LlamaModel::observe(int layer, MatrixInput input, const Tensor& rows, bool fused) const {
  if (!observe_inputs_ || fused) return ok_status();
  return observe_inputs_(layer, input, rows);
}

Status LlamaModel::plan_quantized_handoffs() {
  quantized_handoffs_.assign(layers_.size(), {});
  const op::KernelTable& table = op::kernel_table(device_);
  if (!fused_ || table.decode_gemv_reads_quantized == nullptr || table.decode_gemv_quantizes_output == nullptr) {
    return ok_status();
  }
  // Under tensor parallelism wo and w2 write partial sums: x is complete only after the ranks'
  // sum, which no GEMV writes. Attention's output and w1|w3's are whole for this rank's heads and
  // hidden rows, which its wo and w2 read.
  const bool whole_residual = plan_.ranks == 1;
  const auto hands_on = [&](const op::MatMul& from, op::GemvEpilogue epilogue, const op::MatMul& to) {
    return table.decode_gemv_quantizes_output(from.weight(), epilogue) && table.decode_gemv_reads_quantized(to.weight());
  };
  const bool attention_quantizes = table.attention_quantized_output[static_cast<int>(kv_dtype_)] != nullptr &&
                                   config_.head_dim() % op::kDecodeQuantizedBlock == 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const op::MatMul& next = l + 1 < layers_.size() ? layers_[l + 1].wqkv : classifier_;
    quantized_handoffs_[l] = {attention_quantizes && table.decode_gemv_reads_quantized(layer.wo.weight()),
                              whole_residual && hands_on(layer.wo, op::GemvEpilogue::kAccumulate, layer.w13),
                              hands_on(layer.w13, op::GemvEpilogue::kSwiglu, layer.w2),
                              whole_residual && hands_on(layer.w2, op::GemvEpilogue::kAccumulate, next)};
  }
  return ok_status();
}

op::DecodeGemv LlamaModel::normed_gemv(const Tensor& x, const op::RmsNorm& norm, op::GemvEpilogue epilogue,
                                       Tensor& out) const {
  op::DecodeGemv gemv;
  if (handoff_.form == NormHandoff::Form::kScaled) {
    gemv.in = &handoff_.values;
    gemv.in_sumsq = &handoff_.sumsq;
    if (handoff_.quantized_written) gemv.in_quantized = &handoff_.quantized;
  } else {
    gemv.in = &x;
    gemv.in_norm_weight = &norm.weight();
  }
  gemv.norm_eps = norm.eps();
  gemv.epilogue = epilogue;
  gemv.out = &out;
  return gemv;
}

Status LlamaModel::project_qkv(Layer& layer, Activations& a, bool fused) {
  const op::ExecutionContext& ctx = *ctx_;
  if (fused) {
    op::DecodeGemv gemv = normed_gemv(a.x, layer.attention_norm, op::GemvEpilogue::kRopeKv, a.q);
    gemv.rope_kv = rope_.target(a.positions, nullptr, static_cast<int>(a.q.numel()), keys(layer, a), values(layer, a));
    return layer.wqkv.forward_decode(gemv, ctx);
  }
  if (!a.qkv.is_empty()) {  // stacked: one GEMM, then rope and the cache store in one kernel
    KUIPER_RETURN_IF_ERROR(layer.wqkv.forward(a.normed, a.qkv, ctx));
    return rope_.forward_stacked(a.qkv, a.positions, a.slots, a.q, keys(layer, a), values(layer, a), ctx);
  }
  KUIPER_RETURN_IF_ERROR(layer.wq.forward(a.normed, a.q, ctx));
  KUIPER_RETURN_IF_ERROR(layer.wk.forward(a.normed, a.k, ctx));
  KUIPER_RETURN_IF_ERROR(layer.wv.forward(a.normed, a.v, ctx));
  if (config_.qkv_bias) {
    KUIPER_RETURN_IF_ERROR(op::add_bias(a.q, layer.bq, ctx));
    KUIPER_RETURN_IF_ERROR(op::add_bias(a.k, layer.bk, ctx));
    KUIPER_RETURN_IF_ERROR(op::add_bias(a.v, layer.bv, ctx));
  }
  if (config_.qk_norm) {
    KUIPER_RETURN_IF_ERROR(norm_heads(layer.q_norm, a.q));
    KUIPER_RETURN_IF_ERROR(norm_heads(layer.k_norm, a.k));
  }
  KUIPER_RETURN_IF_ERROR(rope_.forward(a.q, a.k, a.positions, ctx));
  return attention_.store(a.k, a.v, a.slots, keys(layer, a), values(layer, a), ctx);
}

Status LlamaModel::norm_heads(const op::RmsNorm& norm, Tensor& x) {
  KUIPER_ASSIGN_OR_RETURN(Tensor heads, x.reshape({x.numel() / config_.head_dim(), config_.head_dim()}));
  return norm.forward(heads, heads, *ctx_);
}

Status LlamaModel::add_to_residual(const op::MatMul& w, const Tensor& bias, const Tensor& in, const op::RmsNorm& next,
                                   Activations& a, bool fused, const Tensor* in_quantized, bool hand_on_quantized) {
  const op::ExecutionContext& ctx = *ctx_;
  if (fused && plan_.ranks > 1) {
    // This rank's product is a partial sum, and the ranks' sum, taken in x, is x's next value
    // (the plan's carries_residual). The next GEMV normalizes it as it reads it.
    op::DecodeGemv gemv;
    gemv.in = &in;
    gemv.in_quantized = in_quantized;
    gemv.epilogue = plan_.carries_residual() ? op::GemvEpilogue::kAccumulate : op::GemvEpilogue::kStore;
    gemv.out = &a.x;
    KUIPER_RETURN_IF_ERROR(w.forward_decode(gemv, ctx));
    handoff_.form = NormHandoff::Form::kRaw;
    return plan_.sum_partials(a.x, ctx.stream());
  }
  if (fused) {
    // The GEMV adds into x and hands the next norm on: x · g and the sums of squares of x.
    op::DecodeGemv gemv;
    gemv.in = &in;
    gemv.epilogue = op::GemvEpilogue::kAccumulate;
    gemv.out = &a.x;
    gemv.next_norm_weight = &next.weight();
    gemv.next_normed = &handoff_.values;
    gemv.next_sumsq = &handoff_.sumsq;
    gemv.in_quantized = in_quantized;
    if (hand_on_quantized) gemv.out_quantized = &handoff_.quantized;
    handoff_.form = NormHandoff::Form::kScaled;
    handoff_.quantized_written = hand_on_quantized;
    return w.forward_decode(gemv, ctx);
  }
  KUIPER_RETURN_IF_ERROR(w.forward(in, a.delta, ctx));
  KUIPER_RETURN_IF_ERROR(plan_.sum_partials(a.delta, ctx.stream()));
  if (!bias.is_empty()) KUIPER_RETURN_IF_ERROR(op::add_bias(a.delta, bias, ctx));
  return next.forward_residual(a.x, a.delta, a.normed, ctx);
}

Status LlamaModel::feed_forward(Layer& layer, Activations& a, bool fused, Tensor* out_quantized) {
  const op::ExecutionContext& ctx = *ctx_;
  if (fused) {
    op::DecodeGemv gemv = normed_gemv(a.x, layer.ffn_norm, op::GemvEpilogue::kSwiglu, a.swiglu);
    gemv.out_quantized = out_quantized;
    return layer.w13.forward_decode(gemv, ctx);
  }
  if (!a.gate_up.is_empty()) {  // stacked: one GEMM, then swiglu over the halves of its rows
    KUIPER_RETURN_IF_ERROR(layer.w13.forward(a.normed, a.gate_up, ctx));
    return op::swiglu_stacked(a.gate_up, a.hidden, ctx);
  }
  KUIPER_RETURN_IF_ERROR(layer.w1.forward(a.normed, a.gate, ctx));
  KUIPER_RETURN_IF_ERROR(layer.w3.forward(a.normed, a.up, ctx));
  if (config_.mlp_bias) {
    KUIPER_RETURN_IF_ERROR(op::add_bias(a.gate, layer.b1, ctx));
    KUIPER_RETURN_IF_ERROR(op::add_bias(a.up, layer.b3, ctx));
  }
  return op::swiglu(a.gate, a.up, a.hidden, ctx);
}

Status LlamaModel::classify(Activations& a, int first, int count, Tensor& logits, bool fused) {
  if (fused) return classify_rows(a.x, count, logits, fused);
  KUIPER_ASSIGN_OR_RETURN(Tensor normed, a.normed.slice(first, first + count));
  return classify_rows(normed, count, logits, fused);
}

Status LlamaModel::classify_rows(const Tensor& input, int64_t rows, Tensor& logits, bool fused) {
  KUIPER_RETURN_IF_ERROR(observe(config_.n_layers, MatrixInput::kClassifier, input, fused));
  Tensor out = logits, staging;
  if (plan_.split_vocab) {
    // This rank computes its columns of the logits; the ranks gather them.
    const int64_t words = classifier_.weight().rows();
    if (rows <= rank_logits_.dim(0)) {
      KUIPER_ASSIGN_OR_RETURN(out, rank_logits_.slice(0, rows));
      if (rows > 1) {
        KUIPER_ASSIGN_OR_RETURN(staging, gathered_logits_.slice(0, plan_.ranks * rows * words));
      }
    } else {  // forward_all's chunks: buffers for this call only
      KUIPER_ASSIGN_OR_RETURN(out, Tensor::empty(DataType::kFP32, {rows, words}, ctx_->allocator()));
      KUIPER_ASSIGN_OR_RETURN(staging, Tensor::empty(DataType::kFP32, {plan_.ranks * rows * words}, ctx_->allocator()));
    }
  }
  if (fused) {
    KUIPER_RETURN_IF_ERROR(
        classifier_.forward_decode(normed_gemv(input, final_norm_, op::GemvEpilogue::kStore, out), *ctx_));
  } else {
    KUIPER_RETURN_IF_ERROR(classifier_.forward(input, out, *ctx_));
  }
  return plan_.split_vocab ? gather_logits(out, logits, staging) : ok_status();
}

Status LlamaModel::gather_logits(const Tensor& mine, Tensor& logits, Tensor& staging) {
  const Stream stream = ctx_->stream();
  const int64_t rows = mine.dim(0), words = mine.dim(1);
  // One row: rank order is column order.
  if (rows == 1) return plan_.comm->all_gather(mine, logits, stream);
  KUIPER_RETURN_IF_ERROR(plan_.comm->all_gather(mine, staging, stream));
  const size_t width = words * sizeof(float);
  for (int r = 0; r < plan_.ranks; ++r) {
    KUIPER_RETURN_IF_ERROR(copy_rows(static_cast<float*>(logits.raw_data()) + r * words,
                                     config_.vocab_size * sizeof(float),
                                     static_cast<const float*>(staging.raw_data()) + r * rows * words, width, width,
                                     rows, device_, stream));
  }
  return ok_status();
}

Status LlamaModel::decode_step() {
  KUIPER_RETURN_IF_ERROR(run_network(decode_, fused_));
  return classify(decode_, 0, 1, logits_, fused_);
}

template <typename Step>
StatusOr<Tensor> LlamaModel::on_every_rank(const Step& step) {
  if (group_ == nullptr) return step(*this);
  Tensor mine;
  KUIPER_RETURN_IF_ERROR(group_->threads->run([&](int rank) -> Status {
    LlamaModel& model = rank == 0 ? *this : *group_->models[rank];
    KUIPER_ASSIGN_OR_RETURN(Tensor result, step(model));
    if (rank == 0) mine = std::move(result);
    return ok_status();
  }));
  return mine;
}

StatusOr<Tensor> LlamaModel::forward(std::span<const int32_t> tokens, int start_pos) {
  KUIPER_RETURN_IF_ERROR(check_positions(tokens.size(), start_pos));
  return on_every_rank([&](LlamaModel& rank) { return rank.forward_rank(tokens, start_pos); });
}

StatusOr<Tensor> LlamaModel::forward_all(std::span<const int32_t> tokens, int start_pos) {
  KUIPER_RETURN_IF_ERROR(check_positions(tokens.size(), start_pos));
  return on_every_rank([&](LlamaModel& rank) { return rank.forward_all_rank(tokens, start_pos); });
}

StatusOr<Tensor> LlamaModel::forward_step(const StepBatch& batch) {
  KUIPER_RETURN_IF_ERROR(check_step(batch));
  return on_every_rank([&](LlamaModel& rank) { return rank.forward_step_rank(batch); });
}

StatusOr<Tensor> LlamaModel::forward_rank(std::span<const int32_t> tokens, int start_pos) {
  if (tokens.size() == 1) {
    KUIPER_RETURN_IF_ERROR(upload_inputs(tokens, start_pos, decode_));
    decode_.reach = op::decode_attention_reach(start_pos + 1, layers_.front().k_positions.dim(0));
    // Every decode step of one reach queues the same kernels on the same buffers (positions are
    // read on the device), so the first one is recorded and every later one replays the recording.
    if (!use_graph_) {
      KUIPER_RETURN_IF_ERROR(decode_step());
      return logits_;
    }
    std::unique_ptr<DeviceGraph>& graph = decode_graphs_[decode_.reach];
    if (graph == nullptr) {
      KUIPER_ASSIGN_OR_RETURN(graph, capture_graph(ctx_->stream(), [this] { return decode_step(); }));
    }
    KUIPER_RETURN_IF_ERROR(graph->launch(ctx_->stream()));
    return logits_;
  }
  int rows = 0;
  Activations acts;
  for (size_t done = 0; done < tokens.size(); done += rows) {
    rows = static_cast<int>(std::min<size_t>(max_batch_, tokens.size() - done));
    KUIPER_ASSIGN_OR_RETURN(acts, activation_rows(rows));
    acts.slots = acts.positions;
    KUIPER_RETURN_IF_ERROR(upload_inputs(tokens.subspan(done, rows), start_pos + static_cast<int>(done), acts));
    KUIPER_RETURN_IF_ERROR(run_network(acts, false));
  }
  KUIPER_RETURN_IF_ERROR(classify(acts, rows - 1, 1, logits_, false));
  return logits_;
}

StatusOr<Tensor> LlamaModel::forward_all_rank(std::span<const int32_t> tokens, int start_pos) {
  const int64_t vocab = config_.vocab_size, total = static_cast<int64_t>(tokens.size());
  // Every rank ends a chunk with all its logits; only rank 0's are returned, so only it keeps them.
  const bool keeps_logits = plan_.rank == 0;
  Tensor all;
  if (keeps_logits) {
    KUIPER_ASSIGN_OR_RETURN(all, Tensor::empty(DataType::kFP32, {total, vocab}, cpu_allocator()));
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor chunk_logits, Tensor::empty(DataType::kFP32, {max_batch_, vocab}, ctx_->allocator()));
  for (int64_t done = 0; done < total;) {
    const int rows = static_cast<int>(std::min<int64_t>(max_batch_, total - done));
    KUIPER_ASSIGN_OR_RETURN(Activations acts, activation_rows(rows));
    acts.slots = acts.positions;
    KUIPER_RETURN_IF_ERROR(upload_inputs(tokens.subspan(done, rows), start_pos + static_cast<int>(done), acts));
    KUIPER_RETURN_IF_ERROR(run_network(acts, false));
    KUIPER_ASSIGN_OR_RETURN(Tensor logits, chunk_logits.slice(0, rows));
    KUIPER_RETURN_IF_ERROR(classify(acts, 0, rows, logits, false));
    if (keeps_logits) {
      KUIPER_ASSIGN_OR_RETURN(Tensor dst, all.slice(done, done + rows));
      KUIPER_RETURN_IF_ERROR(dst.copy_from(logits, ctx_->stream()));
    }
    done += rows;
  }
  KUIPER_RETURN_IF_ERROR(synchronize(ctx_->stream()));
  return all;
}

Status LlamaModel::check_step(const StepBatch& b) const {
  if (kv_block_size_ == 0) return unsupported("forward_step needs a model made with a paged cache (kv_block_size)");
  const size_t rows = b.tokens.size();
  if (rows == 0 || rows > static_cast<size_t>(max_batch_)) {
    return invalid_argument("a step carries 1 to " + std::to_string(max_batch_) + " rows, got " +
                            std::to_string(rows));
  }
  if (b.positions.size() != rows || b.slots.size() != rows || b.row_sequence.size() != rows) {
    return invalid_argument("a step needs a position, a slot and a sequence for each of its " +
                            std::to_string(rows) + " rows");
  }
  const int64_t sequences = b.table_width > 0 ? static_cast<int64_t>(b.block_tables.size()) / b.table_width : 0;
  if (b.table_width <= 0 || b.table_width > max_table_width_ || sequences > max_sequences_ ||
      static_cast<int64_t>(b.block_tables.size()) != sequences * b.table_width) {
    return invalid_argument("block tables of " + std::to_string(b.block_tables.size()) + " entries, width " +
                            std::to_string(b.table_width) + ", do not fit " + std::to_string(max_sequences_) +
                            " sequences of " + std::to_string(max_table_width_) + " blocks");
  }
  if (b.logit_rows.size() > static_cast<size_t>(max_sequences_)) {
    return invalid_argument("a step returns the logits of at most " + std::to_string(max_sequences_) + " rows");
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || static_cast<size_t>(r) >= rows) return out_of_range("logit row " + std::to_string(r) + " of a step");
  }
  for (size_t i = 0; i < rows; ++i) {
    if (b.positions[i] < 0 || b.positions[i] >= context_ || b.slots[i] < 0 || b.slots[i] >= kv_slots_ ||
        b.row_sequence[i] < 0 || b.row_sequence[i] >= sequences) {
      return out_of_range("step row " + std::to_string(i) + " (position " + std::to_string(b.positions[i]) +
                          ", slot " + std::to_string(b.slots[i]) + ", sequence " +
                          std::to_string(b.row_sequence[i]) + ") is outside the context, pool or tables");
    }
  }
  return ok_status();
}

bool LlamaModel::is_contiguous(const StepBatch& b) const {
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    if (b.row_sequence[i] != b.row_sequence[0] || b.slots[i] != b.positions[i] ||
        b.positions[i] != b.positions[0] + static_cast<int32_t>(i)) {
      return false;
    }
  }
  const int32_t* table = b.block_tables.data() + int64_t{b.row_sequence[0]} * b.table_width;
  const int32_t used = b.positions.back() / kv_block_size_ + 1;
  for (int32_t block = 0; block < used; ++block) {
    if (table[block] != block) return false;
  }
  return true;
}

bool LlamaModel::is_decode_rows(const StepBatch& b) const {
  const size_t rows = b.tokens.size();
  if (b.logit_rows.size() != rows || b.block_tables.size() != rows * static_cast<size_t>(b.table_width)) return false;
  for (size_t i = 0; i < rows; ++i) {
    if (b.logit_rows[i] != static_cast<int32_t>(i) || b.row_sequence[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

Status LlamaModel::upload_step(const StepBatch& b, Activations& a, bool full_width) {
  const Stream stream = ctx_->stream();
  const auto upload = [&](Tensor& dst, std::span<const int32_t> src) {
    return copy_bytes(dst.raw_data(), device_, src.data(), DeviceType::kCPU, src.size_bytes(), stream);
  };
  KUIPER_RETURN_IF_ERROR(upload(a.tokens, b.tokens));
  KUIPER_RETURN_IF_ERROR(upload(a.positions, b.positions));
  KUIPER_RETURN_IF_ERROR(upload(a.slots, b.slots));
  KUIPER_RETURN_IF_ERROR(upload(a.row_sequence, b.row_sequence));
  const int64_t sequences = static_cast<int64_t>(b.block_tables.size()) / b.table_width;
  const int64_t width = full_width ? max_table_width_ : b.table_width;
  std::span<const int32_t> tables = b.block_tables;
  if (full_width) {
    // Entries past a sequence's last block are never read (positions bound every row).
    wide_tables_.assign(sequences * width, 0);
    for (int64_t s = 0; s < sequences; ++s) {
      std::copy_n(b.block_tables.begin() + s * b.table_width, b.table_width, wide_tables_.begin() + s * width);
    }
    tables = wide_tables_;
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor flat, block_tables_.slice(0, sequences * width));
  KUIPER_ASSIGN_OR_RETURN(step_tables_, flat.reshape({sequences, width}));
  KUIPER_RETURN_IF_ERROR(upload(step_tables_, tables));
  paged_ = {&step_tables_, &a.row_sequence, kv_block_size_};
  a.paged = &paged_;
  return ok_status();
}

Status LlamaModel::run_step(const StepBatch& b, Activations& acts, Tensor& logits) {
  const int64_t wanted = static_cast<int64_t>(b.logit_rows.size());
  KUIPER_RETURN_IF_ERROR(run_network(acts, false));
  if (wanted == 0) return ok_status();
  // Only the wanted rows go through the classifier, gathered into consecutive rows.
  KUIPER_ASSIGN_OR_RETURN(Tensor picked, picked_normed_.slice(0, wanted));
  for (int64_t i = 0; i < wanted; ++i) {
    KUIPER_ASSIGN_OR_RETURN(Tensor dst, picked.slice(i, i + 1));
    KUIPER_ASSIGN_OR_RETURN(Tensor src, acts.normed.slice(b.logit_rows[i], b.logit_rows[i] + 1));
    KUIPER_RETURN_IF_ERROR(dst.copy_from(src, ctx_->stream()));
  }
  return classify_rows(picked, wanted, logits, false);
}

StatusOr<Tensor> LlamaModel::forward_step_rank(const StepBatch& b) {
  const int64_t vocab = config_.vocab_size, wanted = static_cast<int64_t>(b.logit_rows.size());
  KUIPER_ASSIGN_OR_RETURN(Tensor logits, step_logits_.slice(0, wanted));
  const bool last_row_only = wanted == 0 || (wanted == 1 && b.logit_rows[0] + 1 == static_cast<int32_t>(b.tokens.size()));
  if (fused_ && last_row_only && is_contiguous(b)) {
    KUIPER_ASSIGN_OR_RETURN(Tensor last, forward_rank(b.tokens, b.positions[0]));
    if (wanted == 0) return logits;
    KUIPER_ASSIGN_OR_RETURN(Tensor row, logits.reshape({vocab}));
    KUIPER_RETURN_IF_ERROR(row.copy_from(last, ctx_->stream()));
    return logits;
  }
  const int rows = static_cast<int>(b.tokens.size());
  KUIPER_ASSIGN_OR_RETURN(Activations acts, activation_rows(rows));
  const bool decode_rows = use_graph_ && is_decode_rows(b);
  decode_rows_streak_ = decode_rows && rows == last_decode_rows_ ? decode_rows_streak_ + 1 : 1;
  last_decode_rows_ = decode_rows ? rows : 0;
  const bool recorded =
      decode_rows && (decode_rows_graphs_.count(rows) != 0 || decode_rows_streak_ >= kSteadySteps);
  KUIPER_RETURN_IF_ERROR(upload_step(b, acts, recorded));
  if (!recorded) {
    KUIPER_RETURN_IF_ERROR(run_step(b, acts, logits));
    return logits;
  }
  // Every buffer the step touches is the same for a row count (activation_rows, the scratch of
  // the execution context, step_logits_), so a recording stays valid as long as the model.
  std::unique_ptr<DeviceGraph>& graph = decode_rows_graphs_[rows];
  if (graph == nullptr) {
    KUIPER_ASSIGN_OR_RETURN(graph, capture_graph(ctx_->stream(), [&] { return run_step(b, acts, logits); }));
  }
  KUIPER_RETURN_IF_ERROR(graph->launch(ctx_->stream()));
  return logits;
}

}  // namespace kuiper
