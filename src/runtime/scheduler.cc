// Scheduler implementation: the instruction inbox, the engine thread's loop of actions
// (recover, admit, submit a mixed decode + chunked-prefill batch, collect the oldest
// batch's logits), slot bookkeeping, faults and stats (see scheduler.h).
#include "runtime/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include "cache/block_hash.h"
#include "cache/prefix_index.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "runtime/scheduler_request.h"

namespace shardlm {
namespace {

// What a resumable task (a prompt's prefill) reports after being offered a step.
enum class TaskState { kFinished, kNotFinished, kBlocked };

}  // namespace

// One sequence slot: the batch's slot index is the index in State::slots.
struct SchedulerSlot {
  std::unique_ptr<ActiveRequest> request;  // null when free
  std::unique_ptr<BlockTable> table;       // the slot's KV; cleared when the request ends
  uint64_t admit_seq = 0;                  // admission order: older prefills go first
  bool awaiting_logits = false;            // a batch in flight gives its next logits row
  int write_begin = 0;                     // positions [write_begin, write_end) of the
  int write_end = 0;                       // batch being built (write_end 0: none)
  // Prefix cache: hashes[i] is the chain hash of full block i (the prompt's at admission,
  // extended as generated tokens fill pages); blocks [0, n_published) are cached or were
  // offered to the cache; publishing stops for good once a block's page is not the cached
  // one (see scheduler.h).
  std::vector<BlockHash> hashes;
  int n_published = 0;
  bool publishing = false;
};

// A submitted batch: whose logits rows it will give, in batch order. The request id guards
// against a slot that was finished and reused while the batch was in flight.
struct Scheduler::InFlight {
  std::vector<int> logit_slots;
  std::vector<RequestId> logit_requests;
  // Per slot the batch writes: positions [0, end) hold KV once the batch is collected.
  struct Written {
    int slot = 0;
    RequestId request = 0;
    int end = 0;
  };
  std::vector<Written> written;
};

// Declaration order is destruction order reversed: tables and the prefix index go before
// the pipeline (whose allocator they release pages into).
struct Scheduler::State {
  std::unique_ptr<Pipeline> pipeline;
  std::unique_ptr<PrefixIndex> index;  // null when options.prefix_cache is off
  Fingerprint128 fingerprint;          // the model's: part of every block hash
  std::vector<SchedulerSlot> slots;
  std::vector<PageList> pages_by_slot;                 // [slot] → its pages, per batch
  std::deque<std::unique_ptr<ActiveRequest>> waiting;  // admitted in this order
  std::deque<InFlight> in_flight;                      // submission order
  std::vector<BatchEntry> batch;
  std::vector<PageCopy> copies;
  std::chrono::steady_clock::time_point last_reconnect;
  uint64_t admit_counter = 0;
  int64_t requests_total = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generated_tokens_total = 0;
  int64_t prompt_tokens_cached = 0;
  int64_t prompt_tokens_computed = 0;

  // Offers a prefilling request up to `budget` batch entries; appends its chunk.
  TaskState PrefillStep(int slot_idx, int& budget, InFlight& record);
  // Marks positions [begin, end) of the slot as written by the batch being built.
  void Touch(SchedulerSlot& slot, int begin, int end);
  // PrepareWrite, evicting unreferenced cached pages when the pool is full.
  Status PrepareWriteWithRoom(SchedulerSlot& slot);
};

Status SchedulerOptions::Validate() const {
  if (n_parallel < 1 || n_ctx < 2 || n_batch < 1 || max_queue < 0 || threads < 0 ||
      page_tokens < 1 || prefill_chunk < 0 || cache_pages < 0) {
    return InvalidArgument(
        "bad scheduler options: parallel {} (>= 1), ctx-size {} (>= 2), batch {} (>= 1), "
        "max-queue {} (>= 0), threads {} (>= 0), page tokens {} (>= 1), prefill chunk {} "
        "(>= 0), cache pages {} (>= 0)",
        n_parallel, n_ctx, n_batch, max_queue, threads, page_tokens, prefill_chunk, cache_pages);
  }
  if (n_batch < n_parallel) {
    return InvalidArgument(
        "the batch size ({}) must be at least --parallel ({}): every running sequence "
        "decodes one token per step",
        n_batch, n_parallel);
  }
  return Status::Ok();
}

PipelineOptions SchedulerOptions::ToPipelineOptions() const {
  PipelineOptions pipeline;
  pipeline.devices = devices;
  pipeline.layer_split = layer_split;
  pipeline.threads = threads;
  const int pages_per_seq = (n_ctx + page_tokens - 1) / page_tokens;
  pipeline.n_pages = n_parallel * pages_per_seq + cache_pages;
  pipeline.page_tokens = page_tokens;
  pipeline.kv_type = kv_type;
  pipeline.max_batch_tokens = n_batch;
  pipeline.max_logit_rows = n_parallel;
  return pipeline;
}

Scheduler::Scheduler(const Tokenizer& tokenizer, const SchedulerOptions& options)
    : tokenizer_(tokenizer), options_(options) {}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const Model& model, const Tokenizer& tokenizer,
                                                     const SchedulerOptions& options) {
  SHARDLM_TRY(options.Validate());
  if (!model.is_first_stage() || !model.is_last_stage()) {
    return InvalidArgument("the scheduler needs every layer of the model, got layers [{}, {})",
                           model.layers().begin, model.layers().end);
  }
  if (tokenizer.n_vocab() != model.config().n_vocab) {
    return InvalidData("the tokenizer has {} tokens but the model's embedding has {} rows",
                       tokenizer.n_vocab(), model.config().n_vocab);
  }
  SHARDLM_ASSIGN_OR_RETURN(
      std::unique_ptr<Pipeline> pipeline,
      Pipeline::Create(model, options.model_path, options.ToPipelineOptions()));
  std::string name = options.model_name;
  if (name.empty()) {
    Result<std::string_view> general = model.file().GetString("general.name");
    name = general.ok() && !general->empty() ? std::string(*general) : "model";
  }
  std::unique_ptr<Scheduler> scheduler(new Scheduler(tokenizer, options));
  SHARDLM_TRY(
      scheduler->Init(std::move(pipeline), std::move(name), ModelFingerprint(model.file())));
  return scheduler;
}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(std::unique_ptr<Pipeline> pipeline,
                                                     const Tokenizer& tokenizer,
                                                     const SchedulerOptions& options) {
  SHARDLM_TRY(options.Validate());
  if (pipeline == nullptr) return InvalidArgument("the scheduler needs a pipeline");
  if (tokenizer.n_vocab() != pipeline->config().n_vocab) {
    return InvalidData("the tokenizer has {} tokens but the model's embedding has {} rows",
                       tokenizer.n_vocab(), pipeline->config().n_vocab);
  }
  const PipelineOptions want = options.ToPipelineOptions();
  if (pipeline->max_batch_tokens() < want.max_batch_tokens ||
      pipeline->max_logit_rows() < want.max_logit_rows ||
      pipeline->allocator().n_pages() < want.n_pages) {
    return InvalidArgument(
        "the pipeline holds {} tokens, {} logits rows and {} pages per batch; the scheduler "
        "options need {}, {} and {}",
        pipeline->max_batch_tokens(), pipeline->max_logit_rows(), pipeline->allocator().n_pages(),
        want.max_batch_tokens, want.max_logit_rows, want.n_pages);
  }
  std::unique_ptr<Scheduler> scheduler(new Scheduler(tokenizer, options));
  std::string name = options.model_name.empty() ? "model" : options.model_name;
  // No model file here: the in-memory cache serves this one pipeline, so any constant
  // fingerprint keys it correctly.
  SHARDLM_TRY(scheduler->Init(std::move(pipeline), std::move(name), Fingerprint128{}));
  return scheduler;
}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(LoadedModel loaded,
                                                     const SchedulerOptions& options) {
  if (!loaded.model || !loaded.tokenizer) {
    return InvalidArgument("the scheduler needs a loaded model and its tokenizer");
  }
  auto owned = std::make_unique<LoadedModel>(std::move(loaded));
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                           Create(*owned->model, *owned->tokenizer, options));
  scheduler->owned_ = std::move(owned);
  return scheduler;
}

Status Scheduler::Init(std::unique_ptr<Pipeline> pipeline, std::string model_name,
                       const Fingerprint128& fingerprint) {
  auto state = std::make_unique<State>();
  state->pipeline = std::move(pipeline);
  state->fingerprint = fingerprint;
  if (options_.prefix_cache) {
    state->index = std::make_unique<PrefixIndex>(&state->pipeline->allocator());
  }
  config_ = state->pipeline->config();
  state->slots.resize(options_.n_parallel);
  for (SchedulerSlot& slot : state->slots) {
    slot.table = std::make_unique<BlockTable>(&state->pipeline->allocator());
  }
  state->pages_by_slot.resize(options_.n_parallel);
  state->batch.reserve(options_.n_batch);

  info_.model_name = std::move(model_name);
  info_.architecture = ArchName(config_.arch);
  info_.n_ctx = options_.n_ctx;
  info_.n_vocab = config_.n_vocab;
  info_.n_parallel = options_.n_parallel;
  info_.stages = state->pipeline->placement();
  stats_.slots_total = options_.n_parallel;
  stats_.kv_pages_total = state->pipeline->allocator().n_pages();

  state_ = std::move(state);
  thread_ = std::thread(&Scheduler::Loop, this);
  return Status::Ok();
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t Scheduler::kv_bytes() const {
  size_t bytes = 0;
  for (const StageInfo& stage : info_.stages) bytes += stage.kv_bytes;
  return bytes;
}

PipelineCounters Scheduler::pipeline_counters() const { return state_->pipeline->counters(); }

Status Scheduler::CheckRequest(const EngineRequest& request) const {
  const int n_prompt = int(request.prompt.size());
  if (n_prompt == 0) return InvalidArgument("the prompt is empty (no tokens)");
  const int32_t n_vocab = config_.n_vocab;
  for (TokenId id : request.prompt) {
    if (id < 0 || id >= n_vocab) {
      return InvalidArgument("prompt token id {} is outside the vocabulary [0, {})", id, n_vocab);
    }
  }
  if (n_prompt + 1 > options_.n_ctx) {
    return OutOfRange(
        "context_length_exceeded: the prompt has {} tokens but a sequence holds {} positions "
        "(prompt + at least 1 generated token must fit; raise --ctx-size)",
        n_prompt, options_.n_ctx);
  }
  if (request.max_tokens < -1) {
    return InvalidArgument("max_tokens must be >= 0 (or -1 for no limit), got {}",
                           request.max_tokens);
  }
  return request.sampling.Validate();
}

Result<RequestId> Scheduler::Submit(EngineRequest request, RequestCallbacks callbacks) {
  SHARDLM_TRY(CheckRequest(request));
  SHARDLM_TRY(state_->pipeline->Health());
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status(StatusCode::kInternal, "the engine is shutting down");
  if (!lost_.ok()) return lost_;
  const int free_slots = options_.n_parallel - active_;
  if (pending_ >= options_.max_queue + free_slots) {
    return OutOfRange("queue full ({} waiting)", std::max(0, pending_ - free_slots));
  }
  Instruction instruction;
  instruction.kind = Instruction::Kind::kSubmit;
  instruction.id = next_id_++;
  instruction.request = std::move(request);
  instruction.callbacks = std::move(callbacks);
  instruction.submitted = SchedulerClock::now();
  const RequestId id = instruction.id;
  ++pending_;
  inbox_.push_back(std::move(instruction));
  cv_.notify_one();
  return id;
}

void Scheduler::Cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  Instruction instruction;
  instruction.kind = Instruction::Kind::kCancel;
  instruction.id = id;
  inbox_.push_back(std::move(instruction));
  cv_.notify_one();
}

EngineStats Scheduler::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats stats = stats_;
  stats.queue_length = pending_;
  return stats;
}

Status Scheduler::Health() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kInternal, "the engine is shutting down");
    if (!lost_.ok()) return lost_;
  }
  return state_->pipeline->Health();
}

// ---- Engine thread ----

void Scheduler::Loop() {
  using Action = bool (Scheduler::*)();
  static constexpr Action kActions[] = {&Scheduler::RecoverAction, &Scheduler::AdmitAction,
                                        &Scheduler::SubmitAction, &Scheduler::CollectAction};
  while (TakeInstructions()) {
    for (Action action : kActions) {
      if ((this->*action)()) break;
    }
  }
  while (!state_->in_flight.empty()) {
    (void)state_->pipeline->WaitOldest();
    state_->in_flight.pop_front();
  }
  CancelEverything();
}

bool Scheduler::TakeInstructions() {
  State& s = *state_;
  std::deque<Instruction> taken;
  bool stop = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool has_work =
        !s.waiting.empty() || !s.in_flight.empty() ||
        std::any_of(s.slots.begin(), s.slots.end(),
                    [](const SchedulerSlot& slot) { return slot.request != nullptr; });
    const auto ready = [&] { return stopping_ || !inbox_.empty(); };
    if (!lost_.ok()) {
      cv_.wait_until(lock, s.last_reconnect + kReconnectInterval, ready);
    } else if (!has_work) {
      cv_.wait(lock, ready);
    }
    taken.swap(inbox_);
    stop = stopping_;
  }
  for (Instruction& instruction : taken) ApplyInstruction(instruction);
  return !stop;
}

void Scheduler::ApplyInstruction(Instruction& instruction) {
  State& s = *state_;
  if (instruction.kind == Instruction::Kind::kSubmit) {
    ++s.requests_total;
    s.prompt_tokens_total += int64_t(instruction.request.prompt.size());
    s.waiting.push_back(std::make_unique<ActiveRequest>(
        instruction.id, std::move(instruction.request), std::move(instruction.callbacks),
        tokenizer_, config_.n_vocab, instruction.submitted));
    return;
  }
  for (size_t i = 0; i < s.waiting.size(); ++i) {
    if (s.waiting[i]->id() == instruction.id) return FinishWaiting(i, FinishReason::kCancelled);
  }
  for (size_t i = 0; i < s.slots.size(); ++i) {
    const SchedulerSlot& slot = s.slots[i];
    if (slot.request && slot.request->id() == instruction.id) {
      return FinishSlot(int(i), FinishReason::kCancelled);
    }
  }
  // Unknown or already finished: Cancel is idempotent.
}

// A lost stage: end everything once, then try to reconnect every kReconnectInterval; no
// other action runs until it is back (a request accepted just before the loss ends too).
bool Scheduler::RecoverAction() {
  State& s = *state_;
  Status lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost = lost_;
  }
  if (lost.ok()) {
    Status health = s.pipeline->Health();
    if (health.ok()) return false;
    FailEverything(health);
    return true;
  }
  while (!s.waiting.empty()) FinishWaiting(0, FinishReason::kError, lost);
  const auto now = std::chrono::steady_clock::now();
  if (now - s.last_reconnect < kReconnectInterval) return true;
  s.last_reconnect = now;
  Status reconnected = s.pipeline->Reconnect();
  if (!reconnected.ok()) return true;
  std::fprintf(stderr, "scheduler: every stage is back; accepting requests again\n");
  std::lock_guard<std::mutex> lock(mu_);
  lost_ = Status::Ok();
  return false;
}

bool Scheduler::AdmitAction() {
  State& s = *state_;
  bool admitted = false;
  for (size_t i = 0; i < s.slots.size() && !s.waiting.empty(); ++i) {
    SchedulerSlot& slot = s.slots[i];
    if (slot.request) continue;
    slot.request = std::move(s.waiting.front());
    s.waiting.pop_front();
    slot.request->MarkAdmitted();
    slot.admit_seq = s.admit_counter++;
    slot.awaiting_logits = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      ++active_;
    }
    admitted = true;
    if (slot.request->request().max_tokens == 0) {
      FinishSlot(int(i), FinishReason::kLength);
    } else {
      MapCachedPrefix(int(i));
    }
  }
  if (admitted) PublishStats();
  return admitted;
}

// Maps the longest cached chain of the prompt's full blocks into the slot's empty table;
// prefill starts after it, but never after the last prompt token (its logits are needed).
void Scheduler::MapCachedPrefix(int slot_idx) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[slot_idx];
  slot.hashes.clear();
  slot.n_published = 0;
  slot.publishing = s.index != nullptr;
  if (!s.index) return;
  ActiveRequest& request = *slot.request;
  slot.hashes = ChainBlockHashes(request.request().prompt, options_.page_tokens, s.fingerprint);
  PrefixHit hit = s.index->Lookup(slot.hashes);
  for (PageId page : hit.pages()) slot.table->AppendSharedPage(page);
  slot.n_published = hit.n_blocks();
  const int cached = std::min(slot.table->n_tokens(), request.n_prompt() - 1);
  request.SetCached(cached);
  s.prompt_tokens_cached += cached;
}

// Publishes the slot's pages that [0, written_end) fills, in chain order.
void Scheduler::PublishFullPages(int slot_idx, int written_end) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[slot_idx];
  const int page_tokens = options_.page_tokens;
  const int n_full = std::min(written_end, slot.table->n_tokens()) / page_tokens;
  std::vector<TokenId> block(size_t(page_tokens), 0);
  while (slot.publishing && slot.n_published < n_full) {
    const int i = slot.n_published;
    const BlockHash parent = i > 0 ? slot.hashes[i - 1] : kRootBlockHash;
    // Only a chain of the index's own pages keeps every unheld cached page evictable.
    if (i > 0 && s.index->PageOf(parent) != slot.table->page(i - 1)) {
      slot.publishing = false;
      break;
    }
    if (i == int(slot.hashes.size())) {
      for (int k = 0; k < page_tokens; ++k) block[k] = slot.request->TokenAt(i * page_tokens + k);
      slot.hashes.push_back(ChainBlockHash(parent, block, s.fingerprint));
    }
    (void)s.index->Publish(slot.hashes[i], parent, slot.table->page(i));
    ++slot.n_published;
  }
}

void Scheduler::State::Touch(SchedulerSlot& slot, int begin, int end) {
  if (slot.write_end == 0) slot.write_begin = begin;
  slot.write_end = end;
}

TaskState Scheduler::State::PrefillStep(int slot_idx, int& budget, InFlight& record) {
  SchedulerSlot& slot = slots[slot_idx];
  ActiveRequest& request = *slot.request;
  if (budget <= 0) return TaskState::kBlocked;
  const int start = request.n_prefilled();
  const int n = std::min(budget, request.n_prompt() - start);
  const bool last = start + n == request.n_prompt();
  for (int k = 0; k < n; ++k) {
    const int pos = start + k;
    batch.push_back({request.request().prompt[pos], pos, slot_idx, last && k == n - 1});
  }
  Touch(slot, start, start + n);
  // Counted as prefilled once submitted: a later chunk may follow it through the stages.
  request.AddPrefilled(n);
  prompt_tokens_computed += n;
  if (last) {
    record.logit_slots.push_back(slot_idx);
    record.logit_requests.push_back(request.id());
    slot.awaiting_logits = true;
  }
  budget -= n;
  return last ? TaskState::kFinished : TaskState::kNotFinished;
}

void Scheduler::BuildBatch(InFlight& record) {
  State& s = *state_;
  s.batch.clear();
  const int depth = s.pipeline->depth();
  int n_decoding = 0;
  for (const SchedulerSlot& slot : s.slots) {
    n_decoding += slot.request && slot.request->prefill_done();
  }
  // With depth > 1 the running streams split into micro-batches that alternate.
  const int decode_cap =
      depth > 1 ? (n_decoding + depth - 1) / depth : std::numeric_limits<int>::max();
  std::vector<int> prefilling;
  int n_decode = 0;
  for (int i = 0; i < int(s.slots.size()); ++i) {
    SchedulerSlot& slot = s.slots[i];
    ActiveRequest* request = slot.request.get();
    if (!request || slot.awaiting_logits) continue;
    if (!request->prefill_done()) {
      prefilling.push_back(i);
      continue;
    }
    if (n_decode == decode_cap) continue;
    s.batch.push_back({request->last_token(), request->next_position(), i, true});
    s.Touch(slot, request->next_position(), request->next_position() + 1);
    record.logit_slots.push_back(i);
    record.logit_requests.push_back(request->id());
    slot.awaiting_logits = true;
    ++n_decode;
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [&](int a, int b) { return s.slots[a].admit_seq < s.slots[b].admit_seq; });
  int budget = options_.n_batch - int(s.batch.size());
  // Depth 1: the cap applies when this batch decodes; pipelined, whenever streams run (a
  // big chunk ahead of them in the stages delays their next token just the same).
  const bool streams_wait = depth > 1 ? n_decoding > 0 : !s.batch.empty();
  if (streams_wait && options_.prefill_chunk > 0) budget = std::min(budget, options_.prefill_chunk);
  for (int i : prefilling) {
    if (s.PrefillStep(i, budget, record) == TaskState::kBlocked) break;
  }
}

Status Scheduler::State::PrepareWriteWithRoom(SchedulerSlot& slot) {
  const int page_tokens = pipeline->allocator().page_tokens();
  // Upper bound of the pages this write may allocate (new or copy-on-write).
  const int n_pages = (slot.write_end - 1) / page_tokens - slot.write_begin / page_tokens + 1;
  for (;;) {
    Status status = slot.table->PrepareWrite(slot.write_begin, slot.write_end, &copies);
    if (status.code() != StatusCode::kOutOfRange || !index) return status;
    if (index->EvictUnreferenced(n_pages) == 0) return status;
  }
}

// Allocates the pages the batch writes (copy-on-write copies into s.copies), lists every
// slot's pages and records in `record` what each slot will have written.
Status Scheduler::PrepareTables(InFlight& record) {
  State& s = *state_;
  s.copies.clear();
  Status status;
  for (size_t i = 0; i < s.slots.size(); ++i) {
    SchedulerSlot& slot = s.slots[i];
    if (slot.write_end > 0 && status.ok()) {
      status = s.PrepareWriteWithRoom(slot);
      if (status.ok()) {
        slot.table->SetTokens(slot.write_end);
        record.written.push_back({int(i), slot.request->id(), slot.write_end});
      }
    }
    slot.write_end = 0;
    s.pages_by_slot[i] = slot.table->pages();
  }
  return status;
}

bool Scheduler::SubmitAction() {
  State& s = *state_;
  if (int(s.in_flight.size()) >= s.pipeline->depth()) return false;
  InFlight record;
  BuildBatch(record);
  if (s.batch.empty()) return false;
  Status status = PrepareTables(record);
  if (status.ok()) status = s.pipeline->Submit({s.batch, s.pages_by_slot, s.copies});
  if (!status.ok()) {
    FailEverything(status);
    return true;
  }
  s.in_flight.push_back(std::move(record));
  return true;
}

bool Scheduler::CollectAction() {
  State& s = *state_;
  if (s.in_flight.empty()) return false;
  Result<std::span<const float>> logits = s.pipeline->WaitOldest();
  InFlight record = std::move(s.in_flight.front());
  s.in_flight.pop_front();
  if (!logits.ok()) {
    FailEverything(logits.status());
    return true;
  }
  // Every stage has written the batch's KV: its full pages may be shared now.
  for (const InFlight::Written& written : record.written) {
    const SchedulerSlot& slot = s.slots[written.slot];
    if (s.index && slot.request && slot.request->id() == written.request) {
      PublishFullPages(written.slot, written.end);
    }
  }
  ProcessLogits(record, *logits);
  PublishStats();
  return true;
}

void Scheduler::ProcessLogits(const InFlight& record, std::span<const float> logits) {
  State& s = *state_;
  const size_t n_vocab = size_t(config_.n_vocab);
  for (size_t row = 0; row < record.logit_slots.size(); ++row) {
    const int i = record.logit_slots[row];
    SchedulerSlot& slot = s.slots[i];
    if (!slot.request || slot.request->id() != record.logit_requests[row]) continue;
    slot.awaiting_logits = false;
    std::optional<FinishReason> done = slot.request->OnLogits(
        logits.subspan(row * n_vocab, n_vocab), slot.table->n_tokens(), options_.n_ctx);
    ++s.generated_tokens_total;
    if (done) FinishSlot(i, *done);
  }
}

// A failed batch: every batch behind it fails too, so every running request ends with the
// error and frees its pages. A lost stage also ends the queued requests and refuses new
// ones until RecoverAction brings it back.
void Scheduler::FailEverything(const Status& error) {
  State& s = *state_;
  std::fprintf(stderr, "scheduler: batch failed: %s\n", error.message().c_str());
  while (!s.in_flight.empty()) {
    (void)s.pipeline->WaitOldest();
    s.in_flight.pop_front();
  }
  const bool lost = error.code() == StatusCode::kUnavailable;
  if (lost) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = error;
  }
  for (int i = 0; i < int(s.slots.size()); ++i) {
    if (s.slots[i].request) FinishSlot(i, FinishReason::kError, error);
  }
  if (lost) {
    while (!s.waiting.empty()) FinishWaiting(0, FinishReason::kError, error);
    s.last_reconnect = std::chrono::steady_clock::now();
    // The lost stage's pages are gone (a reconnected stage starts empty).
    if (s.index) s.index->Clear();
    PublishStats();
  }
}

void Scheduler::FinishSlot(int slot_idx, FinishReason reason, Status error) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[slot_idx];
  std::unique_ptr<ActiveRequest> request = std::move(slot.request);
  // Pages go back to the allocator before anyone hears of the finish. A batch still in
  // flight may write them: every later batch that reuses them runs after it in every stage.
  slot.table->Clear();
  slot.awaiting_logits = false;
  slot.write_end = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
  }
  PublishStats();
  request->Finish(reason, std::move(error), options_.log_requests);
}

void Scheduler::FinishWaiting(size_t index, FinishReason reason, Status error) {
  State& s = *state_;
  std::unique_ptr<ActiveRequest> request = std::move(s.waiting[index]);
  s.waiting.erase(s.waiting.begin() + std::ptrdiff_t(index));
  {
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
  PublishStats();
  request->Finish(reason, std::move(error), options_.log_requests);
}

void Scheduler::CancelEverything() {
  State& s = *state_;
  for (int i = 0; i < int(s.slots.size()); ++i) {
    if (s.slots[i].request) FinishSlot(i, FinishReason::kCancelled);
  }
  while (!s.waiting.empty()) FinishWaiting(0, FinishReason::kCancelled);
}

void Scheduler::PublishStats() {
  const State& s = *state_;
  int busy = 0;
  for (const SchedulerSlot& slot : s.slots) busy += slot.request != nullptr;
  const PageAllocator& allocator = s.pipeline->allocator();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.slots_busy = busy;
  stats_.queue_length = pending_;
  stats_.requests_total = s.requests_total;
  stats_.prompt_tokens_total = s.prompt_tokens_total;
  stats_.generated_tokens_total = s.generated_tokens_total;
  const int cached_only = s.index ? s.index->CountUnreferenced() : 0;
  stats_.kv_pages_used = allocator.n_pages() - allocator.n_free() - cached_only;
  stats_.prompt_tokens_cached = s.prompt_tokens_cached;
  stats_.prompt_tokens_computed = s.prompt_tokens_computed;
  if (s.index) {
    const PrefixIndexStats& cache = s.index->stats();
    stats_.prefix_cache_lookup_blocks = cache.lookup_blocks;
    stats_.prefix_cache_hit_blocks = cache.hit_blocks;
    stats_.prefix_cache_evicted_pages = cache.evicted;
    stats_.prefix_cache_pages = s.index->size();
  }
}

}  // namespace shardlm
