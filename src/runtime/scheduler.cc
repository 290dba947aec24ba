// Scheduler implementation: the instruction inbox, the engine thread's loop of actions
// (admit, then one mixed decode + chunked-prefill batch), slot bookkeeping and stats (see
// scheduler.h).
#include "runtime/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "model/forward.h"
#include "runtime/scheduler_request.h"

namespace shardlm {
namespace {

// What a resumable task (a prompt's prefill) reports after being offered a step.
enum class TaskState { kFinished, kNotFinished, kBlocked };

}  // namespace

// One sequence slot: the forward pass's slot index is the index in State::slots.
struct SchedulerSlot {
  std::unique_ptr<ActiveRequest> request;  // null when free
  std::unique_ptr<BlockTable> table;       // the slot's KV; cleared when the request ends
  uint64_t admit_seq = 0;                  // admission order: older prefills go first
  int chunk = 0;                           // prompt tokens of this slot in the current batch
};

// Declaration order is destruction order reversed: tables go before the allocator, the
// forward pass before the pool, the thread pool last.
struct Scheduler::State {
  std::unique_ptr<ThreadPool> threads;
  std::unique_ptr<PageAllocator> allocator;  // page ids and refcounts
  std::unique_ptr<PagePool> pool;            // page contents
  std::unique_ptr<ForwardPass> forward;
  std::vector<SchedulerSlot> slots;
  std::vector<PageList> pages;                         // [slot] → its page list, per batch
  std::vector<PageCopy> copies;                        // copy-on-write of the current batch
  std::deque<std::unique_ptr<ActiveRequest>> waiting;  // admitted in this order
  std::vector<BatchEntry> batch;
  std::vector<int> logit_slots;  // slot of each logits row, in batch order
  std::vector<int> slot_begin;   // [slot] first position in the batch (−1: none)
  std::vector<int> slot_end;     // [slot] last position in the batch + 1
  std::vector<float> logits;     // [n_parallel][n_vocab]
  uint64_t admit_counter = 0;
  int64_t requests_total = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generated_tokens_total = 0;

  // Offers a prefilling request up to `budget` batch entries; appends its chunk.
  TaskState PrefillStep(int slot_idx, int& budget);
  // Runs `batch`: KV pages made writable (copy-on-write applied), forward pass, lengths.
  Status RunBatch();
};

Status SchedulerOptions::Validate() const {
  if (n_parallel < 1 || n_ctx < 2 || n_batch < 1 || max_queue < 0 || threads < 0 ||
      page_tokens < 1 || prefill_chunk < 0) {
    return InvalidArgument(
        "bad scheduler options: parallel {} (>= 1), ctx-size {} (>= 2), batch {} (>= 1), "
        "max-queue {} (>= 0), threads {} (>= 0), page tokens {} (>= 1), prefill chunk {} "
        "(>= 0)",
        n_parallel, n_ctx, n_batch, max_queue, threads, page_tokens, prefill_chunk);
  }
  if (n_batch < n_parallel) {
    return InvalidArgument(
        "the batch size ({}) must be at least --parallel ({}): every running sequence "
        "decodes one token per step",
        n_batch, n_parallel);
  }
  return Status::Ok();
}

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer,
                     const SchedulerOptions& options)
    : model_(model), tokenizer_(tokenizer), options_(options) {}

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
  std::unique_ptr<Scheduler> scheduler(new Scheduler(model, tokenizer, options));
  SHARDLM_TRY(scheduler->Init());
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

Status Scheduler::Init() {
  auto state = std::make_unique<State>();
  int n_threads = options_.threads;
  if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  state->threads = std::make_unique<ThreadPool>(n_threads);
  const int pages_per_seq = (options_.n_ctx + options_.page_tokens - 1) / options_.page_tokens;
  const int n_pages = options_.n_parallel * pages_per_seq;
  SHARDLM_ASSIGN_OR_RETURN(state->allocator, PageAllocator::Create(n_pages, options_.page_tokens));
  SHARDLM_ASSIGN_OR_RETURN(state->pool, PagePool::Create(model_.KvPoolConfig(
                                            n_pages, options_.page_tokens, options_.kv_type)));
  state->forward =
      std::make_unique<ForwardPass>(model_, *state->pool, *state->threads, options_.n_batch);
  state->slots.resize(options_.n_parallel);
  for (SchedulerSlot& slot : state->slots) {
    slot.table = std::make_unique<BlockTable>(state->allocator.get());
  }
  state->pages.resize(options_.n_parallel);
  state->batch.reserve(options_.n_batch);
  state->logits.resize(size_t(options_.n_parallel) * model_.config().n_vocab);

  info_.model_name = options_.model_name;
  if (info_.model_name.empty()) {
    Result<std::string_view> name = model_.file().GetString("general.name");
    info_.model_name = name.ok() && !name->empty() ? std::string(*name) : "model";
  }
  info_.architecture = ArchName(model_.config().arch);
  info_.n_ctx = options_.n_ctx;
  info_.n_vocab = model_.config().n_vocab;
  info_.n_parallel = options_.n_parallel;
  stats_.slots_total = options_.n_parallel;
  stats_.kv_pages_total = state->allocator->n_pages();

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
  return state_->pool->page_bytes() * size_t(state_->pool->n_pages());
}

Status Scheduler::CheckRequest(const EngineRequest& request) const {
  const int n_prompt = int(request.prompt.size());
  if (n_prompt == 0) return InvalidArgument("the prompt is empty (no tokens)");
  const int32_t n_vocab = model_.config().n_vocab;
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
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status(StatusCode::kInternal, "the engine is shutting down");
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
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status(StatusCode::kInternal, "the engine is shutting down");
  return Status::Ok();
}

// ---- Engine thread ----

void Scheduler::Loop() {
  using Action = bool (Scheduler::*)();
  static constexpr Action kActions[] = {&Scheduler::AdmitAction, &Scheduler::BatchAction};
  while (TakeInstructions()) {
    for (Action action : kActions) {
      if ((this->*action)()) break;
    }
  }
  CancelEverything();
}

bool Scheduler::TakeInstructions() {
  State& s = *state_;
  std::deque<Instruction> taken;
  bool stop = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool has_work = !s.waiting.empty() || std::any_of(s.slots.begin(), s.slots.end(),
                                                            [](const SchedulerSlot& slot) {
                                                              return slot.request != nullptr;
                                                            });
    if (!has_work) cv_.wait(lock, [&] { return stopping_ || !inbox_.empty(); });
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
        tokenizer_, model_.config().n_vocab, instruction.submitted));
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
    slot.chunk = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      ++active_;
    }
    admitted = true;
    if (slot.request->request().max_tokens == 0) FinishSlot(int(i), FinishReason::kLength);
  }
  if (admitted) PublishStats();
  return admitted;
}

TaskState Scheduler::State::PrefillStep(int slot_idx, int& budget) {
  SchedulerSlot& slot = slots[slot_idx];
  const ActiveRequest& request = *slot.request;
  if (budget <= 0) return TaskState::kBlocked;
  const int start = request.n_prefilled();
  const int n = std::min(budget, request.n_prompt() - start);
  const bool last = start + n == request.n_prompt();
  for (int k = 0; k < n; ++k) {
    const int pos = start + k;
    batch.push_back({request.request().prompt[pos], pos, slot_idx, last && k == n - 1});
  }
  if (last) logit_slots.push_back(slot_idx);
  slot.chunk = n;
  budget -= n;
  return last ? TaskState::kFinished : TaskState::kNotFinished;
}

void Scheduler::BuildBatch() {
  State& s = *state_;
  s.batch.clear();
  s.logit_slots.clear();
  std::vector<int> prefilling;
  for (int i = 0; i < int(s.slots.size()); ++i) {
    const ActiveRequest* request = s.slots[i].request.get();
    if (!request) continue;
    if (!request->prefill_done()) {
      prefilling.push_back(i);
      continue;
    }
    s.batch.push_back({request->last_token(), request->next_position(), i, true});
    s.logit_slots.push_back(i);
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [&](int a, int b) { return s.slots[a].admit_seq < s.slots[b].admit_seq; });
  int budget = options_.n_batch - int(s.batch.size());
  if (!s.batch.empty() && options_.prefill_chunk > 0) {
    budget = std::min(budget, options_.prefill_chunk);
  }
  for (int i : prefilling) {
    if (s.PrefillStep(i, budget) == TaskState::kBlocked) break;
  }
}

bool Scheduler::BatchAction() {
  State& s = *state_;
  BuildBatch();
  if (s.batch.empty()) return false;
  Status status = s.RunBatch();
  if (!status.ok()) {
    std::fprintf(stderr, "scheduler: forward pass failed: %s\n", status.message().c_str());
    for (int i = 0; i < int(s.slots.size()); ++i) {
      if (s.slots[i].request) FinishSlot(i, FinishReason::kError, status);
    }
    return true;
  }
  ProcessLogits();
  PublishStats();
  return true;
}

// Makes every written position private (copy-on-write applied to the pool), runs the
// forward pass over the slots' page lists, then records each slot's new length.
Status Scheduler::State::RunBatch() {
  // Per slot the batch's positions are consecutive: [first entry, last entry + 1).
  slot_begin.assign(slots.size(), -1);
  slot_end.assign(slots.size(), -1);
  for (const BatchEntry& e : batch) {
    if (slot_begin[e.slot] < 0) slot_begin[e.slot] = e.position;
    slot_end[e.slot] = e.position + 1;
  }
  copies.clear();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slot_begin[i] < 0) continue;
    SHARDLM_TRY(slots[i].table->PrepareWrite(slot_begin[i], slot_end[i], &copies));
  }
  for (const PageCopy& copy : copies) pool->CopyPage(copy.src, copy.dst);
  for (size_t i = 0; i < slots.size(); ++i) pages[i] = slots[i].table->page_list();
  SHARDLM_TRY(forward->Run(batch, pages, /*hidden_in=*/nullptr, logits.data()));
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slot_begin[i] >= 0) slots[i].table->SetTokens(slot_end[i]);
  }
  return Status::Ok();
}

void Scheduler::ProcessLogits() {
  State& s = *state_;
  for (SchedulerSlot& slot : s.slots) {
    if (slot.request && slot.chunk > 0) slot.request->AddPrefilled(slot.chunk);
    slot.chunk = 0;
  }
  const size_t n_vocab = size_t(model_.config().n_vocab);
  for (size_t row = 0; row < s.logit_slots.size(); ++row) {
    const int i = s.logit_slots[row];
    SchedulerSlot& slot = s.slots[i];
    if (!slot.request) continue;
    std::span<const float> logits(s.logits.data() + row * n_vocab, n_vocab);
    std::optional<FinishReason> done =
        slot.request->OnLogits(logits, slot.table->n_tokens(), options_.n_ctx);
    ++s.generated_tokens_total;
    if (done) FinishSlot(i, *done);
  }
}

void Scheduler::FinishSlot(int slot_idx, FinishReason reason, Status error) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[slot_idx];
  std::unique_ptr<ActiveRequest> request = std::move(slot.request);
  slot.table->Clear();  // pages go back to the allocator before anyone hears of the finish
  slot.chunk = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
  }
  PublishStats();
  request->Finish(reason, std::move(error), options_.log_requests);
}

void Scheduler::FinishWaiting(size_t index, FinishReason reason) {
  State& s = *state_;
  std::unique_ptr<ActiveRequest> request = std::move(s.waiting[index]);
  s.waiting.erase(s.waiting.begin() + std::ptrdiff_t(index));
  {
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
  PublishStats();
  request->Finish(reason, Status::Ok(), options_.log_requests);
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
  std::lock_guard<std::mutex> lock(mu_);
  stats_.slots_busy = busy;
  stats_.queue_length = pending_;
  stats_.requests_total = s.requests_total;
  stats_.prompt_tokens_total = s.prompt_tokens_total;
  stats_.generated_tokens_total = s.generated_tokens_total;
  stats_.kv_pages_used = s.allocator->n_pages() - s.allocator->n_free();
}

}  // namespace shardlm
