#include "kuiper/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "kuiper/base/device.h"
#include "kuiper/engine/block_pool.h"
#include "kuiper/engine/stop_strings.h"
#include "kuiper/op/layers.h"
#include "kuiper/sampler/sampler.h"

namespace kuiper {
namespace {

using Clock = std::chrono::steady_clock;

// Generated tokens per second are averaged over this window.
constexpr double kRateWindowSeconds = 5.0;

int blocks_for(int64_t positions, int block_size) {
  return static_cast<int>((positions + block_size - 1) / block_size);
}

struct Request {
  RequestId id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  OutputCallback on_output;
};

SamplerConfig sampler_config(const SamplingParams& p) {
  SamplerConfig c;
  c.temperature = p.temperature;
  c.top_p = p.top_p;
  c.top_k = p.top_k;
  c.min_p = p.min_p;
  c.seed = p.seed;
  return c;
}

}  // namespace

// A running request: its tokens (prompt, then generated), how many of them the cache holds, the
// blocks holding them, and its sampling and text state.
struct Sequence {
  Sequence(Request r, const Tokenizer& tokenizer)
      : id(r.id), params(std::move(r.params)), on_output(std::move(r.on_output)), tokens(std::move(r.prompt)),
        prompt_tokens(static_cast<int>(tokens.size())), sampler(sampler_config(params)), decoder(tokenizer),
        stops(params.stop) {
    // Text continues from the last prompt token, so pieces render as they would in context.
    decoder.push(tokens.back());
  }
  int generated() const { return static_cast<int>(tokens.size()) - prompt_tokens; }
  // Rows still to run before the next token can be sampled.
  int pending_rows() const { return static_cast<int>(tokens.size()) - computed; }

  RequestId id;
  SamplingParams params;
  OutputCallback on_output;
  std::vector<int32_t> tokens;
  int prompt_tokens;
  int cached_tokens = 0;  // prompt tokens found in the prefix cache
  int computed = 0;       // tokens whose keys and values are in the cache
  int max_blocks = 0;     // blocks the sequence may come to hold (reserved at admission)
  std::vector<int32_t> blocks;
  int published = 0;      // leading blocks published to the prefix cache
  uint64_t chain = BlockPool::kRootHash;  // chain hash after the published blocks
  Sampler sampler;
  StreamDecoder decoder;
  StopStrings stops;
  RequestOutput out;      // what this step produced for the request
  bool finished = false;
};

class EngineState {
 public:
  EngineState(std::unique_ptr<LlamaModel> model, const Tokenizer& tokenizer, const EngineOptions& options)
      : model_(std::move(model)), tokenizer_(tokenizer), options_(options),
        pool_(model_->kv_slots() / options.kv_block_size, options.kv_block_size, options.prefix_cache) {
    end_tokens_ = tokenizer.eos_ids();
    if (options.stop_at_bos && tokenizer.bos_id() >= 0) end_tokens_.push_back(tokenizer.bos_id());
  }

  // The host and device buffers a step's results go through, sized for max_seqs logit rows.
  Status allocate_step_buffers();
  StatusOr<RequestId> submit(std::vector<int32_t> prompt, const SamplingParams& params, OutputCallback on_output);
  void cancel(RequestId id);
  EngineMetrics metrics() const;
  StatusOr<bool> step();
  Status run();
  void stop();

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const LlamaModel& model() const { return *model_; }

 private:
  int max_blocks(const Request& r) const {
    const int64_t positions = std::min<int64_t>(int64_t{static_cast<int>(r.prompt.size())} + r.params.max_tokens,
                                                model_->context());
    return blocks_for(positions, pool_.block_size());
  }
  // Blocks that running sequences may still allocate.
  int reserved_blocks() const;
  // Moves queued requests into the running set, first come first served, while the pool and the
  // limits have room. Called with mu_ held.
  void admit_waiting(std::vector<Request>& cancelled);
  void apply_cancellations();
  // Gives `seq` the block that position `pos` falls in, if it has none yet.
  Status ensure_block(Sequence& seq, int pos);
  // Adds the rows of every running sequence that fit this step to the batch.
  void build_batch();
  // The step's results for the sequences that got logits: sample, stop, emit.
  void take_token(Sequence& seq, std::span<float> logits);
  // The token chosen for `seq` (by its sampler or by argmax on the device): stop checks, text.
  void accept_token(Sequence& seq, StatusOr<int32_t> token);
  // Whether every sequence getting logits this step takes the largest one, unchanged: the
  // device then picks the tokens and only they cross to the host.
  bool step_is_greedy() const;

  void publish_full_blocks(Sequence& seq);
  void finish(Sequence& seq, FinishReason reason, Status error = ok_status());
  void deliver(Sequence& seq);
  // Delivers the step's outputs, returns the blocks of finished sequences and updates the
  // metrics; `generated`: tokens the step sampled.
  void retire_finished(int generated);
  // Runs the step's batch and samples the sequences that got logits; returns tokens sampled.
  StatusOr<int> run_batch();
  void fail_all(const Status& error);

  std::unique_ptr<LlamaModel> model_;
  const Tokenizer& tokenizer_;
  EngineOptions options_;
  BlockPool pool_;
  std::vector<int32_t> end_tokens_;

  // Shared with other threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Request> waiting_;
  std::vector<RequestId> cancel_requests_;
  bool stop_requested_ = false;
  RequestId next_id_ = 1;
  EngineMetrics counters_;  // running, waiting, totals and pool figures, updated after each step
  std::deque<std::pair<Clock::time_point, int>> recent_tokens_;

  // The engine thread's own.
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  // This step's batch (StepBatch), and the sequences whose logits it returns, in order.
  std::vector<int32_t> tokens_, positions_, slots_, row_sequence_, tables_, logit_rows_;
  std::vector<Sequence*> step_sequences_, logit_sequences_;
  std::vector<int> step_rows_;  // rows each of step_sequences_ runs
  // Where the step's logits (or, for an all-greedy step, its picked tokens) land on the host:
  // page-locked, so that the copy runs at the link's speed. Sized for the largest step.
  Tensor host_logits_, device_tokens_, host_tokens_;
};

StatusOr<RequestId> EngineState::submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                        OutputCallback on_output) {
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  if (static_cast<int64_t>(prompt.size()) + 1 > model_->context()) {
    return out_of_range("prompt is " + std::to_string(prompt.size()) + " tokens, the context holds " +
                        std::to_string(model_->context()));
  }
  const int vocab = model_->config().vocab_size;
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab) {
      return invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary of " +
                              std::to_string(vocab));
    }
  }
  KUIPER_RETURN_IF_ERROR(validate(params));
  Request r{0, std::move(prompt), params, std::move(on_output)};
  if (max_blocks(r) > pool_.total()) {
    return out_of_range("the request needs " + std::to_string(max_blocks(r)) + " KV cache blocks of " +
                        std::to_string(pool_.block_size()) + " positions (prompt and max_tokens) but the pool holds " +
                        std::to_string(pool_.total()));
  }
  std::lock_guard lock(mu_);
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
    return resource_exhausted("the queue is full (" + std::to_string(waiting_.size()) + " requests waiting)");
  }
  r.id = next_id_++;
  const RequestId id = r.id;
  waiting_.push_back(std::move(r));
  counters_.waiting = static_cast<int>(waiting_.size());
  wake_.notify_all();
  return id;
}

void EngineState::cancel(RequestId id) {
  std::lock_guard lock(mu_);
  cancel_requests_.push_back(id);
  wake_.notify_all();
}

EngineMetrics EngineState::metrics() const {
  std::lock_guard lock(mu_);
  EngineMetrics m = counters_;
  m.waiting = static_cast<int>(waiting_.size());
  return m;
}

void EngineState::stop() {
  std::lock_guard lock(mu_);
  stop_requested_ = true;
  wake_.notify_all();
}

int EngineState::reserved_blocks() const {
  int reserved = 0;
  for (const auto& seq : running_) reserved += seq->max_blocks - static_cast<int>(seq->blocks.size());
  return reserved;
}

void EngineState::admit_waiting(std::vector<Request>& cancelled) {
  // Cancelled while waiting: they never run.
  for (RequestId id : cancel_requests_) {
    const auto it = std::find_if(waiting_.begin(), waiting_.end(), [id](const Request& r) { return r.id == id; });
    if (it == waiting_.end()) continue;
    cancelled.push_back(std::move(*it));
    waiting_.erase(it);
  }
  int reserved = reserved_blocks();
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_seqs) {
    Request& r = waiting_.front();
    const int needed = max_blocks(r);
    uint64_t chain = BlockPool::kRootHash;
    // At least the last prompt token runs, for the logits of the first generated token.
    std::vector<int32_t> matched = pool_.match_prefix(r.prompt, static_cast<int>(r.prompt.size()) - 1, chain);
    if (pool_.available() - reserved < needed - static_cast<int>(matched.size())) {
      for (int32_t b : matched) pool_.release(b);
      break;  // first come first served: later requests wait behind this one
    }
    auto seq = std::make_unique<Sequence>(std::move(r), tokenizer_);
    waiting_.pop_front();
    seq->max_blocks = needed;
    seq->blocks = std::move(matched);
    seq->published = static_cast<int>(seq->blocks.size());
    seq->chain = chain;
    seq->computed = seq->cached_tokens = seq->published * pool_.block_size();
    seq->out.cached_prompt_tokens = seq->cached_tokens;
    counters_.prompt_tokens_cached += seq->cached_tokens;
    reserved += needed - static_cast<int>(seq->blocks.size());
    running_.push_back(std::move(seq));
  }
}

void EngineState::apply_cancellations() {
  std::vector<Request> cancelled;
  {
    std::lock_guard lock(mu_);
    admit_waiting(cancelled);
    for (RequestId id : cancel_requests_) {
      for (auto& seq : running_) {
        if (seq->id == id && !seq->finished) finish(*seq, FinishReason::kCancelled);
      }
    }
    cancel_requests_.clear();
    counters_.requests_cancelled += cancelled.size();
  }
  for (Request& r : cancelled) {
    RequestOutput out;
    out.finish = FinishReason::kCancelled;
    out.prompt_tokens = static_cast<int>(r.prompt.size());
    if (r.on_output) r.on_output(out);
  }
}

Status EngineState::ensure_block(Sequence& seq, int pos) {
  const size_t index = static_cast<size_t>(pos / pool_.block_size());
  while (seq.blocks.size() <= index) {
    // Admission reserved this block, so the pool has it.
    KUIPER_ASSIGN_OR_RETURN(int32_t block, pool_.allocate());
    seq.blocks.push_back(block);
  }
  return ok_status();
}

void EngineState::build_batch() {
  tokens_.clear();
  positions_.clear();
  slots_.clear();
  row_sequence_.clear();
  logit_rows_.clear();
  step_sequences_.clear();
  step_rows_.clear();
  logit_sequences_.clear();
  // Decode rows first (one each), then prompt chunks in admission order with the rows left: a
  // prompt never holds running streams up for more than one step.
  int budget = options_.max_step_rows;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& owned : running_) {
      Sequence& seq = *owned;
      const bool decoding = seq.computed >= seq.prompt_tokens;
      if (seq.finished || decoding != (pass == 0) || budget == 0) continue;
      const int rows = std::min(seq.pending_rows(), budget);
      if (Status s = ensure_block(seq, seq.computed + rows - 1); !s.ok()) {
        finish(seq, FinishReason::kError, s);
        continue;
      }
      const int index = static_cast<int>(step_sequences_.size());
      const int block = pool_.block_size();
      for (int pos = seq.computed; pos < seq.computed + rows; ++pos) {
        tokens_.push_back(seq.tokens[pos]);
        positions_.push_back(pos);
        slots_.push_back(seq.blocks[pos / block] * block + pos % block);
        row_sequence_.push_back(index);
      }
      budget -= rows;
      step_sequences_.push_back(&seq);
      step_rows_.push_back(rows);
      if (rows == seq.pending_rows()) {
        logit_rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
        logit_sequences_.push_back(&seq);
      }
    }
  }
  size_t width = 1;
  for (const Sequence* seq : step_sequences_) width = std::max(width, seq->blocks.size());
  tables_.assign(step_sequences_.size() * width, 0);
  for (size_t s = 0; s < step_sequences_.size(); ++s) {
    std::copy(step_sequences_[s]->blocks.begin(), step_sequences_[s]->blocks.end(), tables_.begin() + s * width);
  }
}

void EngineState::publish_full_blocks(Sequence& seq) {
  const int block = pool_.block_size();
  while ((seq.published + 1) * block <= seq.computed) {
    const auto tokens = std::span<const int32_t>(seq.tokens).subspan(seq.published * block, block);
    seq.chain = pool_.publish(seq.blocks[seq.published], seq.chain, tokens);
    ++seq.published;
  }
}

void EngineState::take_token(Sequence& seq, std::span<float> logits) {
  if (options_.observe_logits) options_.observe_logits(seq.id, seq.computed - 1, logits);
  if (seq.params.max_tokens == 0) return finish(seq, FinishReason::kLength);
  const Penalties penalties{seq.params.presence_penalty, seq.params.frequency_penalty, seq.params.repetition_penalty};
  if (penalties.any()) {
    const std::span<const int32_t> all(seq.tokens);
    apply_penalties(logits, penalties, all, all.subspan(seq.prompt_tokens));
  }
  accept_token(seq, seq.sampler.sample(logits));
}

void EngineState::accept_token(Sequence& seq, StatusOr<int32_t> token) {
  if (seq.params.max_tokens == 0) return finish(seq, FinishReason::kLength);
  if (!token.ok()) {
    return finish(seq, FinishReason::kError,
                  invalid_format("the model produced non-finite logits at position " + std::to_string(seq.computed - 1) +
                                 " (" + token.status().message() + ")"));
  }
  const auto ends = [&](const std::vector<int32_t>& ids) { return std::find(ids.begin(), ids.end(), *token) != ids.end(); };
  if (!seq.params.ignore_eos && (ends(end_tokens_) || ends(seq.params.stop_token_ids))) {
    return finish(seq, FinishReason::kStop);
  }
  seq.tokens.push_back(*token);
  seq.out.tokens.push_back(*token);
  seq.out.text += seq.stops.push(seq.decoder.push(*token));
  if (seq.stops.stopped()) return finish(seq, FinishReason::kStop);
  // A token sampled at the context's last position is emitted but never run: it needs no slot.
  if (seq.generated() >= seq.params.max_tokens || static_cast<int>(seq.tokens.size()) > model_->context()) {
    return finish(seq, FinishReason::kLength);
  }
}

void EngineState::finish(Sequence& seq, FinishReason reason, Status error) {
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    seq.out.text += seq.stops.push(seq.decoder.flush());
    seq.out.text += seq.stops.flush();
  }
  seq.out.finish = reason;
  seq.out.error = std::move(error);
  seq.finished = true;
}

void EngineState::deliver(Sequence& seq) {
  RequestOutput& out = seq.out;
  if (out.tokens.empty() && out.text.empty() && out.finish == FinishReason::kNone) return;
  out.prompt_tokens = seq.prompt_tokens;
  out.cached_prompt_tokens = seq.cached_tokens;
  out.completion_tokens = seq.generated();
  if (seq.on_output) seq.on_output(out);
  out.tokens.clear();
  out.text.clear();
}

void EngineState::retire_finished(int generated) {
  for (auto& seq : running_) deliver(*seq);
  std::lock_guard lock(mu_);
  for (auto& seq : running_) {
    if (!seq->finished) continue;
    for (int32_t b : seq->blocks) pool_.release(b);
    seq->blocks.clear();
    if (seq->out.finish == FinishReason::kCancelled) {
      ++counters_.requests_cancelled;
    } else {
      ++counters_.requests_finished;
    }
  }
  std::erase_if(running_, [](const auto& seq) { return seq->finished; });
  const auto now = Clock::now();
  counters_.tokens_generated += generated;
  recent_tokens_.emplace_back(now, generated);
  while (!recent_tokens_.empty() &&
         std::chrono::duration<double>(now - recent_tokens_.front().first).count() > kRateWindowSeconds) {
    recent_tokens_.pop_front();
  }
  int window_tokens = 0;
  for (const auto& [time, count] : recent_tokens_) window_tokens += count;
  const double span = recent_tokens_.empty() ? 0 : std::chrono::duration<double>(now - recent_tokens_.front().first).count();
  counters_.generated_tokens_per_second = span > 0 ? window_tokens / span : 0;
  counters_.running = static_cast<int>(running_.size());
  counters_.kv_blocks_total = pool_.total();
  counters_.kv_blocks_free = pool_.available();
  counters_.kv_blocks_used = pool_.referenced();
}

void EngineState::fail_all(const Status& error) {
  for (auto& seq : running_) {
    if (!seq->finished) finish(*seq, FinishReason::kError, error);
  }
}

Status EngineState::allocate_step_buffers() {
  const int64_t rows = options_.max_seqs, vocab = model_->config().vocab_size;
  KUIPER_ASSIGN_OR_RETURN(host_logits_, Tensor::empty(DataType::kFP32, {rows * vocab}, pinned_host_allocator()));
  KUIPER_ASSIGN_OR_RETURN(host_tokens_, Tensor::empty(DataType::kINT32, {rows}, pinned_host_allocator()));
  KUIPER_ASSIGN_OR_RETURN(device_tokens_, Tensor::empty(DataType::kINT32, {rows}, model_->execution_context().allocator()));
  return ok_status();
}

bool EngineState::step_is_greedy() const {
  if (options_.observe_logits) return false;
  return std::all_of(logit_sequences_.begin(), logit_sequences_.end(), [](const Sequence* seq) {
    const SamplingParams& p = seq->params;
    return seq->sampler.is_greedy() &&
           !Penalties{p.presence_penalty, p.frequency_penalty, p.repetition_penalty}.any();
  });
}

StatusOr<int> EngineState::run_batch() {
  StepBatch batch;
  batch.tokens = tokens_;
  batch.positions = positions_;
  batch.slots = slots_;
  batch.row_sequence = row_sequence_;
  batch.block_tables = tables_;
  batch.table_width = static_cast<int>(tables_.size() / step_sequences_.size());
  batch.logit_rows = logit_rows_;
  KUIPER_ASSIGN_OR_RETURN(Tensor logits, model_->forward_step(batch));
  const bool greedy = step_is_greedy();
  if (!logit_rows_.empty()) {
    if (greedy) {
      KUIPER_ASSIGN_OR_RETURN(Tensor picked, device_tokens_.slice(0, static_cast<int64_t>(logit_rows_.size())));
      KUIPER_RETURN_IF_ERROR(op::argmax(logits, picked, model_->execution_context()));
      KUIPER_ASSIGN_OR_RETURN(Tensor host, host_tokens_.slice(0, picked.numel()));
      KUIPER_RETURN_IF_ERROR(host.copy_from(picked, model_->stream()));
    } else {
      KUIPER_ASSIGN_OR_RETURN(Tensor host, host_logits_.slice(0, logits.numel()));
      KUIPER_RETURN_IF_ERROR(host.copy_from(logits, model_->stream()));
    }
  }
  KUIPER_RETURN_IF_ERROR(synchronize(model_->stream()));
  {
    std::lock_guard lock(mu_);
    for (size_t s = 0; s < step_sequences_.size(); ++s) {
      Sequence& seq = *step_sequences_[s];
      counters_.prompt_tokens_prefilled += std::max(0, std::min(seq.computed + step_rows_[s], seq.prompt_tokens) - seq.computed);
      seq.computed += step_rows_[s];
      publish_full_blocks(seq);
    }
  }
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  int generated = 0;
  for (size_t i = 0; i < logit_sequences_.size(); ++i) {
    Sequence& seq = *logit_sequences_[i];
    const size_t before = seq.tokens.size();
    if (greedy) {
      const int32_t token = host_tokens_.data<int32_t>()[i];
      accept_token(seq, token >= 0 ? StatusOr<int32_t>(token) : invalid_format("NaN or Inf among them"));
    } else {
      // Penalties adjust the host copy of the logits in place.
      take_token(seq, std::span<float>(host_logits_.data<float>() + i * vocab, vocab));
    }
    generated += static_cast<int>(seq.tokens.size() - before);
  }
  return generated;
}

StatusOr<bool> EngineState::step() {
  apply_cancellations();
  build_batch();
  Status status = ok_status();
  int generated = 0;
  if (!tokens_.empty()) {
    StatusOr<int> sampled = run_batch();
    if (sampled.ok()) {
      generated = *sampled;
    } else {
      status = sampled.status();
      fail_all(status);
    }
  }
  const bool worked = !running_.empty();
  retire_finished(generated);
  if (!status.ok()) return status;
  std::lock_guard lock(mu_);
  return worked || !waiting_.empty() || !cancel_requests_.empty();
}

Status EngineState::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stop_requested_) break;
    }
    StatusOr<bool> busy = step();
    if (busy.ok() && *busy) continue;
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(100),
                   [this] { return stop_requested_ || !waiting_.empty() || !cancel_requests_.empty(); });
  }
  {
    std::lock_guard lock(mu_);
    for (const Request& r : waiting_) cancel_requests_.push_back(r.id);
    for (const auto& seq : running_) cancel_requests_.push_back(seq->id);
  }
  apply_cancellations();
  retire_finished(0);
  return ok_status();
}

Engine::Engine(std::unique_ptr<EngineState> state) : state_(std::move(state)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::create(const LlamaConfig& config, const LlamaWeights& weights,
                                                 const ModelOptions& model_options, const Tokenizer& tokenizer,
                                                 const EngineOptions& options) {
  if (options.max_seqs <= 0 || options.max_step_rows < options.max_seqs || options.kv_block_size <= 0 ||
      options.kv_blocks < 0 || options.max_waiting < 0) {
    return invalid_argument("engine options: max_seqs and kv_block_size must be positive, max_step_rows at least "
                            "max_seqs, kv_blocks and max_waiting >= 0");
  }
  if (tokenizer.vocab_size() != config.vocab_size) {
    return invalid_argument("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                            " tokens but the model expects " + std::to_string(config.vocab_size));
  }
  ModelOptions m = model_options;
  m.max_batch = options.max_step_rows;
  m.kv_block_size = options.kv_block_size;
  m.max_sequences = options.max_seqs;
  // The context is needed to size the default pool: a model made first says what it is.
  int context = m.context;
  if (context == 0) {
    context = std::min(config.max_seq_len, ModelOptions::kDefaultContext);
    if (config.sliding_window > 0) context = std::min(context, config.sliding_window);
  }
  const int64_t blocks = options.kv_blocks > 0 ? options.kv_blocks
                                               : int64_t{options.max_seqs} * blocks_for(context, options.kv_block_size);
  if (blocks * options.kv_block_size > (int64_t{1} << 31) - 1) {
    return invalid_argument("a KV pool of " + std::to_string(blocks) + " blocks is too large");
  }
  m.kv_slots = static_cast<int>(blocks * options.kv_block_size);
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::create(config, weights, m));
  auto state = std::make_unique<EngineState>(std::move(model), tokenizer, options);
  KUIPER_RETURN_IF_ERROR(state->allocate_step_buffers());
  return std::unique_ptr<Engine>(new Engine(std::move(state)));
}

StatusOr<RequestId> Engine::submit(std::vector<int32_t> prompt, const SamplingParams& params, OutputCallback on_output) {
  return state_->submit(std::move(prompt), params, std::move(on_output));
}
void Engine::cancel(RequestId id) { state_->cancel(id); }
EngineMetrics Engine::metrics() const { return state_->metrics(); }
StatusOr<bool> Engine::step() { return state_->step(); }
Status Engine::run() { return state_->run(); }
void Engine::stop() { state_->stop(); }
const Tokenizer& Engine::tokenizer() const { return state_->tokenizer(); }
int Engine::context() const { return state_->model().context(); }
const LlamaModel& Engine::model() const { return state_->model(); }

}  // namespace kuiper
