// Scheduler implementation: creation, the instruction inbox, the engine thread's loop of
// actions (recover, admit; submit and collect live in scheduler_batch.cc), slot bookkeeping,
// faults and stats (see scheduler.h). Its options are scheduler_options.cc, the checks of a
// request before it is queued scheduler_checks.cc.
#include "engine/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "base/thread_name.h"
#include "engine/scheduler_impl.h"
#include "engine/scheduler_prefix_cache.h"
#include "engine/scheduler_request.h"
#include "kv/block_table.h"
#include "kv/kv_tier.h"
#include "kv/page_allocator.h"

namespace shardlm {

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
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> pipeline,
                           Pipeline::Create(model, options.ToPipelineOptions()));
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
  if (pipeline->max_batch_tokens() < want.kv.max_batch_tokens ||
      pipeline->max_logit_rows() < want.max_logit_rows ||
      pipeline->max_embedding_rows() < want.max_embedding_rows ||
      pipeline->allocator().n_pages() < want.kv.n_pages) {
    return InvalidArgument(
        "the pipeline holds {} tokens, {} logits rows, {} embedding rows and {} pages per "
        "batch; the scheduler options need {}, {}, {} and {}",
        pipeline->max_batch_tokens(), pipeline->max_logit_rows(), pipeline->max_embedding_rows(),
        pipeline->allocator().n_pages(), want.kv.max_batch_tokens, want.max_logit_rows,
        want.max_embedding_rows, want.kv.n_pages);
  }
  if (!options.kv_cache_dir.empty()) {
    return InvalidArgument(
        "the disk tier needs the model file's fingerprint: create the scheduler from the model");
  }
  std::unique_ptr<Scheduler> scheduler(new Scheduler(tokenizer, options));
  std::string name = options.model_name.empty() ? "model" : options.model_name;
  // No model file here: the in-memory cache serves this one pipeline, so any constant
  // fingerprint keys it correctly (Init uses one); slot files cannot name the model.
  SHARDLM_TRY(scheduler->Init(std::move(pipeline), std::move(name), std::nullopt));
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
                       std::optional<Fingerprint128> model_fingerprint) {
  // A windowed layer whose KV is in the pages (WindowKv::kFull) reads every position of its
  // window: under a bounded pool they stay resident because the tail (never evicted) covers
  // the widest window. Rings (kRing) hold the windows outside the pool.
  const int window = options_.window_kv == WindowKv::kFull ? pipeline->config().WidestWindow() : 0;
  if (options_.bounded_kv() && window > options_.kv_pool.tail_tokens) {
    std::fprintf(stderr, "scheduler: --kv-tail %d raised to %d, the model's attention window\n",
                 options_.kv_pool.tail_tokens, window);
    options_.kv_pool.tail_tokens = window;
  }
  auto state = std::make_unique<State>();
  state->pipeline = std::move(pipeline);
  const Fingerprint128 fingerprint = model_fingerprint.value_or(Fingerprint128{});
  if (model_fingerprint) {
    slot_layout_ =
        PipelineSnapshotLayout(*state->pipeline, fingerprint, options_.kv_type, options_.window_kv);
  }
  if (!options_.kv_cache_dir.empty()) {
    SchedulerDiskCacheOptions disk;
    disk.dir = options_.kv_cache_dir;
    disk.budget_bytes = options_.kv_cache_budget;
    disk.model = fingerprint;
    disk.kv_type = options_.kv_type;
    disk.window_kv = options_.window_kv;
    SHARDLM_ASSIGN_OR_RETURN(state->disk_cache,
                             SchedulerDiskCache::Open(state->pipeline.get(), std::move(disk)));
  }
  if (options_.bounded_kv()) {
    SHARDLM_ASSIGN_OR_RETURN(state->pager, Pager::Create(options_.Pager()));
    state->pipeline->allocator().SetFreeHook(
        [pager = state->pager.get()](PageId page) { pager->OnPageFreed(page); });
    state->attended_by_slot.resize(options_.n_parallel);
  }
  state->recurrent = std::make_unique<RecurrentCheckpoints>(
      state->pipeline.get(), options_.page_tokens, options_.n_parallel,
      options_.prefix_cache ? state->disk_cache.get() : nullptr);
  state->prefix_cache = std::make_unique<SchedulerPrefixCache>(
      options_.prefix_cache, &state->pipeline->allocator(), options_.n_parallel,
      options_.page_tokens, fingerprint, state->disk_cache.get(), state->pager.get(),
      state->recurrent.get());
  config_ = state->pipeline->config();
  state->slots.resize(options_.n_parallel);
  for (SchedulerSlot& slot : state->slots) {
    slot.table = std::make_unique<BlockTable>(&state->pipeline->allocator());
    slot.retained = std::make_unique<BlockTable>(&state->pipeline->allocator());
  }
  state->page_marks.resize(size_t(state->pipeline->allocator().n_pages()));
  state->pages_by_slot.resize(options_.n_parallel);
  state->batch.reserve(options_.n_batch);

  info_.model_name = std::move(model_name);
  info_.architecture = ArchName(config_.arch);
  info_.n_ctx = options_.n_ctx;
  info_.n_vocab = config_.n_vocab;
  info_.n_embd = config_.n_embd;
  info_.n_parallel = options_.n_parallel;
  info_.embeddings = state->pipeline->max_embedding_rows() > 0;
  info_.stages = state->pipeline->placement();
  if (options_.bounded_kv()) {
    info_.kv_pool = options_.kv_pool.pool_tokens;
    info_.kv_tier = KvTierSpecName(options_.kv_tier);
    info_.kv_select = PageSelectName(options_.kv_pool.select);
    info_.kv_sink = options_.kv_pool.sink_tokens;
    info_.kv_tail = options_.kv_pool.tail_tokens;
    info_.kv_reselect = options_.kv_pool.reselect_tokens;
  }
  stats_.slots_total = options_.n_parallel;
  stats_.kv_pages_total = state->pipeline->allocator().n_pages();
  for (int i = 0; i < options_.n_parallel; ++i) slot_infos_.push_back(SlotInfo{.id = i});

  state_ = std::move(state);
  if (!options_.prefill_worker.empty()) SHARDLM_TRY(ConnectPrefillWorker(model_fingerprint));
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
  // Before mu_ and cv_ go: a prefill worker's pipeline calls back into them until it is joined.
  state_.reset();
}

size_t Scheduler::kv_bytes() const {
  size_t bytes = 0;
  for (const StageInfo& stage : info_.stages) {
    bytes += stage.kv_bytes + stage.ring_bytes_per_sequence * size_t(options_.n_parallel);
  }
  return bytes;
}

PipelineCounters Scheduler::pipeline_counters() const { return state_->pipeline->counters(); }

std::vector<StageStats> Scheduler::stage_stats() const { return state_->pipeline->Stats(); }

Result<RequestId> Scheduler::Submit(EngineRequest request, RequestCallbacks callbacks) {
  std::vector<std::pair<EngineRequest, RequestCallbacks>> one;
  one.emplace_back(std::move(request), std::move(callbacks));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<RequestId> ids, SubmitAll(std::move(one)));
  return ids.front();
}

std::shared_ptr<const grammar::TokenVocabulary> Scheduler::Vocabulary(
    const std::vector<TokenId>& rendered_specials) {
  std::vector<TokenId> key = rendered_specials;
  std::sort(key.begin(), key.end());
  key.erase(std::unique(key.begin(), key.end()), key.end());
  std::lock_guard<std::mutex> lock(vocabulary_mu_);
  std::shared_ptr<const grammar::TokenVocabulary>& vocabulary = vocabularies_[key];
  // Tens of milliseconds for a 152k vocabulary: paid once, here rather than on the engine
  // thread, where it would stall every running stream.
  if (!vocabulary) vocabulary = grammar::TokenVocabulary::FromTokenizer(tokenizer_, key);
  return vocabulary;
}

Result<std::vector<RequestId>> Scheduler::SubmitAll(
    std::vector<std::pair<EngineRequest, RequestCallbacks>> requests) {
  for (const auto& [request, callbacks] : requests) SHARDLM_TRY(CheckRequest(request));
  SHARDLM_TRY(state_->pipeline->Health());
  std::vector<std::shared_ptr<const grammar::TokenVocabulary>> vocabularies;
  for (const auto& [request, callbacks] : requests) {
    vocabularies.push_back(request.grammar ? Vocabulary(request.rendered_specials) : nullptr);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status(StatusCode::kInternal, "the engine is shutting down");
  if (!lost_.ok()) return lost_;
  const int free_slots = options_.n_parallel - active_;
  if (pending_ + int(requests.size()) > options_.max_queue + free_slots) {
    return OutOfRange("queue full ({} waiting)", std::max(0, pending_ - free_slots));
  }
  std::vector<RequestId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    Instruction instruction;
    instruction.kind = Instruction::Kind::kSubmit;
    instruction.id = next_id_++;
    instruction.request = std::move(requests[i].first);
    instruction.callbacks = std::move(requests[i].second);
    instruction.vocabulary = std::move(vocabularies[i]);
    instruction.submitted = SchedulerClock::now();
    ids.push_back(instruction.id);
    ++pending_;
    inbox_.push_back(std::move(instruction));
  }
  cv_.notify_one();
  return ids;
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
  // Set once in Init; its counters are thread-safe and move with the writer thread.
  if (state_->disk_cache) state_->disk_cache->FillStats(stats);
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
  SetThreadName("engine");
  using Action = bool (Scheduler::*)();
  static constexpr Action kActions[] = {&Scheduler::RecoverAction, &Scheduler::SlotTaskAction,
                                        &Scheduler::AdmitAction,   &Scheduler::PrefillWorkerAction,
                                        &Scheduler::SubmitAction,  &Scheduler::CollectAction};
  while (TakeInstructions()) {
    state_->prefix_cache->CatchUpPersist();
    for (Action action : kActions) {
      if ((this->*action)()) break;
    }
  }
  while (!state_->in_flight.empty()) {
    (void)state_->pipeline->WaitOldest();
    state_->in_flight.pop_front();
  }
  if (state_->worker != nullptr) DrainPrefillWorker();
  CancelEverything();
}

bool Scheduler::TakeInstructions() {
  State& s = *state_;
  std::deque<Instruction> taken;
  bool stop = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool has_work = s.HasWork();
    const auto ready = [&] { return stopping_ || !inbox_.empty() || worker_batch_done_; };
    if (!lost_.ok()) {
      cv_.wait_until(lock, s.last_reconnect + kReconnectInterval, ready);
    } else if (!has_work && !s.worker_lost.ok()) {
      cv_.wait_until(lock, s.worker_last_reconnect + kReconnectInterval, ready);
    } else if (!has_work && s.prefix_cache->persist_backlog()) {
      // Blocks wait for the disk's export queue: offer them again shortly.
      cv_.wait_for(lock, kPersistRetry, ready);
    } else if (!has_work) {
      cv_.wait(lock, ready);
    }
    taken.swap(inbox_);
    stop = stopping_;
  }
  for (Instruction& instruction : taken) ApplyInstruction(instruction);
  return !stop;
}

bool Scheduler::State::HasWork() const {
  // (A worker batch whose pages have moved goes to the worker next.)
  if (!waiting.empty() || !in_flight.empty() || !slot_tasks.empty() || worker_moving) return true;
  // A prompt on the prefill worker is waited for through worker_batch_done_ instead.
  for (int i = 0; i < int(slots.size()); ++i) {
    if (slots[i].request != nullptr && !WaitsForWorker(i)) return true;
  }
  return false;
}

void Scheduler::ApplyInstruction(Instruction& instruction) {
  State& s = *state_;
  if (instruction.kind == Instruction::Kind::kSlot) return StartSlotJob(instruction.slot_job);
  if (instruction.kind == Instruction::Kind::kSubmit) {
    ++s.requests_total;
    s.prompt_tokens_total += int64_t(instruction.request.prompt.size());
    std::unique_ptr<grammar::TokenMatcher> matcher;
    if (instruction.request.grammar) {
      std::unique_ptr<grammar::AutomatonCache>& automata = s.automata[instruction.vocabulary.get()];
      if (!automata) automata = std::make_unique<grammar::AutomatonCache>(instruction.vocabulary);
      matcher = std::make_unique<grammar::TokenMatcher>(automata->Get(instruction.request.grammar));
    }
    s.waiting.push_back(std::make_unique<ActiveRequest>(
        instruction.id, std::move(instruction.request), std::move(instruction.callbacks),
        tokenizer_, config_.n_vocab, instruction.submitted, std::move(matcher)));
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
  RemapPrefillWorker();
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
    if (!State::Admissible(slot) || s.HoldsBack(int(i))) continue;
    DropRetained(slot);
    slot.request = std::move(s.waiting.front());
    s.waiting.pop_front();
    slot.request->MarkAdmitted();
    if (s.pager != nullptr) {
      s.pager->BeginSequence(int(i), nullptr, 0);
      const EngineRequest& asked = slot.request->request();
      std::vector<std::pair<int32_t, int32_t>> pins = s.pager->WithPrefixPin(
          asked.pins, std::min(asked.pin_prefix, int32_t(asked.prompt.size())));
      s.pager->SetPins(int(i), pins);
      slot.request->SetPins(std::move(pins));
    }
    slot.admit_seq = s.admit_counter++;
    slot.awaiting_logits = false;
    slot.route = PrefillRoute::kUndecided;
    slot.n_committed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      ++active_;
    }
    admitted = true;
    if (!slot.request->samples() && !slot.request->prompt_outputs().any()) {
      FinishSlot(int(i), FinishReason::kLength);
    } else {
      s.prefix_cache->Admit(int(i), *slot.request, *slot.table);
    }
  }
  if (admitted) PublishStats();
  return admitted;
}

// A failed batch: every batch behind it fails too, so every running request ends with the
// error and frees its pages. A lost stage also ends the queued requests and refuses new
// ones until RecoverAction brings it back.
void Scheduler::FailEverything(const Status& error) {
  State& s = *state_;
  std::fprintf(stderr, "scheduler: batch failed: %s\n", error.message().c_str());
  if (s.worker != nullptr) DrainPrefillWorker();
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
  // A retained page may have been written by the failed batch (a cancelled request's last
  // one), and a lost stage's pages are gone.
  DropAllSlotState(error);
  if (s.pager != nullptr) {
    // The failed batch may have moved pages in some stages and not others: every stage
    // forgets every page, the cached ones too.
    s.prefix_cache->Clear();
    s.pager->Reset();
  }
  if (lost) {
    while (!s.waiting.empty()) FinishWaiting(0, FinishReason::kError, error);
    s.last_reconnect = std::chrono::steady_clock::now();
    // The lost stage's pages are gone (a reconnected stage starts empty).
    s.prefix_cache->Clear();
    PublishStats();
  }
}

// A KV tier failed to move some pages (a truncated or full tier file): the requests and
// retained sequences that hold them end; everything else runs on (the stages stayed
// consistent). The prefix cache forgets every page the tiers hold, not only the ones found
// lost: a truncated file took its neighbours too, and a cached prefix read from it would
// fail the next request that continues it (a running request that needs one fails when it
// reads it).
void Scheduler::LosePages(const PagingLoss& loss) {
  State& s = *state_;
  auto lost = [&](PageId page) {
    return std::find(loss.pages.begin(), loss.pages.end(), page) != loss.pages.end();
  };
  auto holds_lost = [&](const BlockTable& table) {
    return std::any_of(table.pages().begin(), table.pages().end(), lost);
  };
  const Status error = loss.error.WithContext("the KV tier lost pages this request needs");
  int ended = 0;
  for (int i = 0; i < int(s.slots.size()); ++i) {
    SchedulerSlot& slot = s.slots[i];
    if (holds_lost(*slot.retained)) DropRetained(slot);
    if (slot.request && holds_lost(*slot.table)) {
      FinishSlot(i, FinishReason::kError, error);
      ++ended;
    }
  }
  s.prefix_cache->ForgetPages([&](PageId page) { return !s.pager->resident(page) || lost(page); });
  std::fprintf(stderr, "scheduler: %zu KV pages lost (%s); %d requests ended\n", loss.pages.size(),
               loss.error.message().c_str(), ended);
  PublishStats();
}

void Scheduler::FinishSlot(int slot_idx, FinishReason reason, Status error) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[slot_idx];
  std::unique_ptr<ActiveRequest> request = std::move(slot.request);
  // Pages go back to the allocator before anyone hears of the finish, but those of the
  // committed positions, which the slot retains. A batch still in flight may write them:
  // every later batch that reuses them runs after it in every stage (a save waits for it).
  if (s.pager != nullptr) request->SetPageIns(int64_t(s.pager->page_ins(slot_idx)));
  if (HoldBackWorkerPages(slot)) {
    // A worker batch may still write its pages: no retention, released once it is collected.
  } else if (reason == FinishReason::kError) {
    slot.table->Clear();
  } else {
    s.prefix_cache->RememberSequence(slot_idx);
    RetainSequence(slot, *request);
  }
  s.prefix_cache->EndSlot(slot_idx);
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
  DropAllSlotState(Status(StatusCode::kInternal, "the engine is shutting down"));
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
  const int retained_only = CountRetainedOnly();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.slots_busy = busy;
  stats_.queue_length = pending_;
  stats_.requests_total = s.requests_total;
  stats_.prompt_tokens_total = s.prompt_tokens_total;
  stats_.generated_tokens_total = s.generated_tokens_total;
  const int cached_only = s.prefix_cache->n_cached_only();
  stats_.kv_pages_used = allocator.n_pages() - allocator.n_free() - cached_only - retained_only;
  stats_.kv_pages_retained = retained_only;
  for (size_t i = 0; i < s.slots.size(); ++i) {
    const SchedulerSlot& slot = s.slots[i];
    SlotInfo& info = slot_infos_[i];
    info.state = slot.request ? SlotState::kProcessing : slot.task;
    info.n_tokens = slot.request ? slot.table->n_tokens() : int(slot.retained_tokens.size());
  }
  stats_.prompt_tokens_computed = s.prompt_tokens_computed;
  stats_.prefill_worker_handoffs = s.worker_handoffs;
  stats_.prefill_worker_tokens = s.worker_tokens;
  stats_.prefill_worker_state_bytes = s.worker_state_bytes;
  stats_.prefill_worker_failed_requests = s.worker_failed_requests;
  stats_.prefill_worker_up = s.worker != nullptr && s.worker_lost.ok();
  s.prefix_cache->FillStats(stats_);
  if (s.pager != nullptr) {
    const PagerStats pager = s.pager->Stats();
    stats_.kv_pool_reselects = int64_t(pager.reselects);
    stats_.kv_pool_pages_mapped = int64_t(pager.pages_mapped);
    stats_.kv_pool_pages_evicted = int64_t(pager.pages_evicted);
    stats_.kv_pool_pinned_pages = pager.pinned_pages;
    stats_.kv_pool_select_seconds = pager.select_seconds;
  }
}

}  // namespace shardlm
