// Scheduler, prefill worker (scheduler.h "Prefill worker"): connecting the worker over the local
// stage's shared pages, routing long prompts to it, its batches beside the local ones, the
// handoff of a prefilled prompt to the decode stage, and what its loss costs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/elapsed.h"
#include "engine/scheduler.h"
#include "engine/scheduler_impl.h"
#include "engine/scheduler_request.h"
#include "kv/block_table.h"
#include "pipeline/remote_stage.h"

namespace shardlm {

Status Scheduler::ConnectPrefillWorker(std::optional<Fingerprint128> fingerprint) {
  if (!fingerprint) {
    return InvalidArgument(
        "a prefill worker needs the model file (its fingerprint and path): create the "
        "scheduler from the model");
  }
  State& s = *state_;
  const Pipeline& decode = *s.pipeline;
  const std::vector<const ShmRegion*> shared = decode.SharedKv();
  RemoteStageOptions remote;
  for (int i = 0; i < decode.n_stages(); ++i) {
    if (shared[i] == nullptr && decode.page_bytes()[i] > 0) {
      return Status(StatusCode::kInternal,
                    fmt::format("decode stage {}'s pages are not in shared memory", i));
    }
    // The worker lays each decode stage's layers over that stage's pages.
    remote.shared_kv_layers.push_back(decode.placement()[i].layers);
  }
  // Asked at every handshake: a decode stage in a daemon that came back has a new region.
  remote.shared_kv_regions = [&decode] { return decode.SharedKv(); };
  remote.index = 0;
  remote.socket_path = options_.prefill_worker;
  remote.model_path = options_.placement.model_path;
  remote.fingerprint = *fingerprint;
  remote.config = config_;
  remote.layers = LayerRange{0, config_.n_layers};
  remote.kv = options_.Kv();
  // A worker batch samples at most the first token of each prompt it ends.
  remote.max_logit_rows = options_.n_parallel;
  Result<std::unique_ptr<RemoteStage>> stage = RemoteStage::Create(remote);
  if (!stage.ok()) return stage.status().WithContext("prefill worker");
  s.worker_stage = stage->get();
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::move(stage).value());
  PipelineOptions options;
  options.kv = options_.Kv();
  options.max_logit_rows = options_.n_parallel;
  options.asynchronous = true;
  SHARDLM_ASSIGN_OR_RETURN(s.worker, Pipeline::FromStages(std::move(stages), config_, options));
  s.worker->SetOnBatchDone([this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      worker_batch_done_ = true;
    }
    cv_.notify_all();
  });
  s.worker_min_tokens = options_.disagg_min_tokens;
  const StageInfo info = s.worker->placement()[0];
  std::fprintf(stderr,
               "scheduler: prefill worker %s: prompts of at least %d uncached tokens prefill "
               "there, into this stage's shared pages\n",
               info.device.c_str(), options_.disagg_min_tokens);
  return Status::Ok();
}

void Scheduler::RemapPrefillWorker() {
  State& s = *state_;
  if (s.worker_stage == nullptr) return;
  bool remote = false;
  for (const StageInfo& info : s.pipeline->placement()) remote = remote || info.remote;
  if (!remote) return;
  const Status remap = Unavailable("a decode stage came back with new pages; the worker maps them");
  s.worker_stage->Disconnect(remap);
  s.worker_lost = remap;
  s.worker_last_reconnect = {};
}

bool Scheduler::State::WorkerCandidate(int slot_idx) const {
  if (worker == nullptr || !worker_lost.ok()) return false;
  const ActiveRequest* request = slots[slot_idx].request.get();
  if (request == nullptr || request->prefill_done() || !request->samples() ||
      request->prompt_outputs().any() || prefix_cache->loading(slot_idx)) {
    return false;
  }
  return request->n_prompt() - request->n_prefilled() >= worker_min_tokens;
}

bool Scheduler::State::WaitsForWorker(int slot_idx) const {
  const SchedulerSlot& slot = slots[slot_idx];
  if (worker == nullptr || slot.request == nullptr) return false;
  const bool for_worker = slot.route == PrefillRoute::kWorker ||
                          (slot.route == PrefillRoute::kUndecided && WorkerCandidate(slot_idx));
  if (!for_worker) return false;
  return slot.awaiting_logits || int(worker_in_flight.size()) >= WorkerDepth();
}

int Scheduler::State::WorkerDepth() const {
  // Under a bounded pool one worker batch at a time: the next one's moves could evict pages the
  // last one still reads.
  return pager != nullptr ? 1 : worker->depth();
}

bool Scheduler::PrefillWorkerAction() {
  State& s = *state_;
  if (s.worker == nullptr) return false;
  if (!s.worker_lost.ok()) {
    const auto now = std::chrono::steady_clock::now();
    if (now - s.worker_last_reconnect < kReconnectInterval) return false;
    s.worker_last_reconnect = now;
    if (!s.worker->Reconnect().ok()) return false;
    std::fprintf(stderr, "scheduler: the prefill worker is back\n");
    s.worker_lost = Status::Ok();
    ReleaseHeldBackPages(/*reconnected=*/true);
    PublishStats();
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    worker_batch_done_ = false;
  }
  if (s.worker_moving) {
    // Its pages are in their frames once the decode pipeline has collected the moves.
    if (s.collected() < s.worker_moving->after) return false;
    State::WorkerMoving& moving = *s.worker_moving;
    const std::vector<PageList> pages(moving.pages.begin(), moving.pages.end());
    const std::vector<PageList> frames(moving.frames.begin(), moving.frames.end());
    const std::vector<AttendedPages> attended(moving.attended.begin(), moving.attended.end());
    PipelineBatch batch{moving.entries, pages, {}};
    batch.attended_by_slot = attended;
    batch.frames_by_slot = frames;
    const Status sent = s.worker->Submit(batch);
    s.worker_moving.reset();
    if (!sent.ok()) FailWorkerSubmit(sent);
    return true;
  }
  if (!s.worker_in_flight.empty() && s.worker->OldestDone()) {
    CollectWorkerBatch();
    return true;
  }
  if (int(s.worker_in_flight.size()) >= s.WorkerDepth()) return false;
  // Under a bounded pool its moves go through the decode pipeline first: it needs room.
  if (s.pager != nullptr && int(s.in_flight.size()) >= s.pipeline->depth()) return false;
  InFlight record;
  if (Status up = BuildWorkerBatch(record); !up.ok()) {
    FailPrefillWorker(up);
    return true;
  }
  if (s.batch.empty()) return false;
  Status status = PrepareTables(record);
  if (status.ok()) {
    status = s.pager != nullptr
                 ? MoveWorkerBatchPages()
                 : s.worker->Submit(PipelineBatch{s.batch, s.pages_by_slot, s.copies});
  }
  if (!status.ok()) {
    FailWorkerSubmit(status);
    return true;
  }
  ++s.worker_submitted;
  for (const BatchEntry& entry : s.batch) s.slots[entry.slot].worker_fence = s.worker_submitted;
  s.worker_tokens += int64_t(s.batch.size());
  s.worker_in_flight.push_back(std::move(record));
  return true;
}

void Scheduler::FailWorkerSubmit(const Status& status) {
  if (status.code() == StatusCode::kUnavailable) {
    FailPrefillWorker(status);
  } else {
    FailEverything(status);
  }
}

Status Scheduler::MoveWorkerBatchPages() {
  State& s = *state_;
  PipelineBatch moves{s.batch, s.pages_by_slot, s.copies};
  moves.paging = &s.pager->pending();
  moves.attended_by_slot = s.attended_by_slot;
  moves.apply_only = true;
  SHARDLM_TRY(s.pipeline->Submit(moves));
  s.pager->ClearPending(s.batches_submitted + 1);
  s.in_flight.push_back(InFlight());
  ++s.batches_submitted;
  State::WorkerMoving moving;
  moving.after = s.batches_submitted;
  moving.entries = s.batch;
  moving.pages.resize(s.pages_by_slot.size());
  moving.frames.resize(s.pages_by_slot.size());
  moving.attended.resize(s.pages_by_slot.size());
  for (const BatchEntry& entry : s.batch) {
    const size_t slot = size_t(entry.slot);
    if (!moving.pages[slot].empty()) continue;
    const PageList pages = s.pages_by_slot[slot];
    const AttendedPages attended = s.attended_by_slot[slot];
    moving.pages[slot].assign(pages.begin(), pages.end());
    moving.attended[slot].assign(attended.begin(), attended.end());
    // The frame of every page the batch reads (all of them while the context fits the pool).
    std::vector<PageId>& frames = moving.frames[slot];
    frames.assign(pages.size(), kNoPage);
    if (attended.empty()) {
      for (size_t i = 0; i < pages.size(); ++i) frames[i] = s.pager->frame(pages[i]);
    } else {
      for (int32_t i : attended) frames[size_t(i)] = s.pager->frame(pages[size_t(i)]);
    }
  }
  s.worker_moving = std::move(moving);
  return Status::Ok();
}

// The worker's batch: prompt chunks only, oldest admission first, n_batch tokens (it delays no
// stream, so no prefill_chunk cap). A prompt goes to the worker when its first chunk does.
Status Scheduler::BuildWorkerBatch(InFlight& record) {
  State& s = *state_;
  s.batch.clear();
  std::vector<int> prefilling;
  for (int i = 0; i < int(s.slots.size()); ++i) {
    const SchedulerSlot& slot = s.slots[i];
    if (!slot.request || slot.awaiting_logits || slot.request->prefill_done()) continue;
    if (slot.route == PrefillRoute::kWorker ||
        (slot.route == PrefillRoute::kUndecided && s.WorkerCandidate(i))) {
      prefilling.push_back(i);
    }
  }
  if (prefilling.empty()) return Status::Ok();
  // A worker that died while idle: found out before a prompt goes to it, not by failing one.
  SHARDLM_TRY(s.worker_stage->Probe());
  std::sort(prefilling.begin(), prefilling.end(),
            [&](int a, int b) { return s.slots[a].admit_seq < s.slots[b].admit_seq; });
  int budget = options_.n_batch;
  s.disk_page_budget = 0;
  s.prompt_logit_budget = options_.prompt_logit_rows;
  for (int i : prefilling) {
    SchedulerSlot& slot = s.slots[i];
    if (slot.route == PrefillRoute::kUndecided) {
      // A recurrent or windowed model resuming a cached prefix: the state it resumes from is in
      // the local stage (the prefix cache imported it there); the worker continues from a copy.
      const int start = slot.request->n_prefilled();
      if (start > 0 && !s.MoveState(*s.pipeline, *s.worker, i, start).ok()) {
        slot.route = PrefillRoute::kLocal;
        continue;
      }
      slot.route = PrefillRoute::kWorker;
    }
    if (s.PrefillStep(i, budget, record) == TaskState::kBlocked) break;
  }
  return Status::Ok();
}

Status Scheduler::State::MoveState(Pipeline& from, Pipeline& to, int slot_idx, int position) {
  const size_t bytes = pipeline->state_bytes();
  if (bytes == 0) return Status::Ok();
  handoff_state.resize(bytes);
  SHARDLM_TRY(from.ExportState(slot_idx, position, handoff_state));
  SHARDLM_TRY(to.ImportState(slot_idx, position, handoff_state));
  worker_state_bytes += int64_t(bytes);
  return Status::Ok();
}

void Scheduler::CollectWorkerBatch() {
  State& s = *state_;
  Result<PipelineOutputs> outputs = s.worker->WaitOldestOutputs();
  InFlight record = std::move(s.worker_in_flight.front());
  s.worker_in_flight.pop_front();
  if (!outputs.ok()) {
    // Counted as collected only after FailPrefillWorker held its pages back: a worker that timed
    // out may be hung rather than dead, and still write them.
    FailPrefillWorker(outputs.status());
    ++s.worker_collected;
    ReleaseHeldBackPages(/*reconnected=*/false);
    return;
  }
  ++s.worker_collected;
  ApplyCollected(record, *outputs, /*from_worker=*/true);
  ReleaseHeldBackPages(/*reconnected=*/false);
}

void Scheduler::HandOff(int slot_idx) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[slot_idx];
  ActiveRequest& request = *slot.request;
  // Every worker batch of the prompt is collected: from here on it is a local sequence.
  slot.route = PrefillRoute::kLocal;
  const auto start = std::chrono::steady_clock::now();
  const Status moved = s.MoveState(*s.worker, *s.pipeline, slot_idx, request.n_prompt());
  if (!moved.ok()) {
    FinishSlot(slot_idx, FinishReason::kError,
               moved.WithContext("handing the prompt's state from the prefill worker over"));
    return;
  }
  ++s.worker_handoffs;
  request.SetHandoff(MsSince(start));
}

void Scheduler::FailPrefillWorker(const Status& error) {
  State& s = *state_;
  const bool lost = error.code() == StatusCode::kUnavailable;
  std::fprintf(stderr, "scheduler: the prefill worker failed: %s; %s\n", error.message().c_str(),
               lost ? "the prompts it was prefilling fail, later ones prefill here until it is back"
                    : "the prompts it was prefilling fail");
  if (lost) {
    s.worker_lost = error;
    s.worker_last_reconnect = std::chrono::steady_clock::now();
    if (options_.on_prefill_worker_lost) {
      options_.on_prefill_worker_lost(s.worker_stage->daemon_pid());
    }
  }
  const Status failure(
      error.code(),
      fmt::format("the prefill worker failed while computing the prompt: {}", error.message()));
  for (int i = 0; i < int(s.slots.size()); ++i) {
    const SchedulerSlot& slot = s.slots[i];
    if (!slot.request || slot.route != PrefillRoute::kWorker) continue;
    ++s.worker_failed_requests;
    FinishSlot(i, FinishReason::kError, failure);
  }
  // A lost worker may be hung rather than dead, still writing the pages of the batch it was
  // computing: those stay held back until it reconnects, which its old session must end first.
  if (lost) {
    for (State::HeldBack& held : s.held_back) {
      if (held.fence > s.worker_collected) held.fence = State::kUntilReconnect;
    }
  }
  DrainPrefillWorker();
  ReleaseHeldBackPages(/*reconnected=*/false);
  PublishStats();
}

void Scheduler::DrainPrefillWorker() {
  State& s = *state_;
  // A batch still waiting for its moves never reached the worker (it is the newest).
  const bool unsent = s.worker_moving.has_value();
  s.worker_moving.reset();
  while (!s.worker_in_flight.empty()) {
    if (!unsent || s.worker_in_flight.size() > 1) (void)s.worker->WaitOldest();
    s.worker_in_flight.pop_front();
    ++s.worker_collected;
  }
}

bool Scheduler::HoldBackWorkerPages(SchedulerSlot& slot) {
  State& s = *state_;
  if (slot.route != PrefillRoute::kWorker || slot.worker_fence <= s.worker_collected) return false;
  s.held_back.push_back({.fence = slot.worker_fence,
                         .table = std::move(slot.table),
                         .slot = int(&slot - s.slots.data())});
  slot.table = std::make_unique<BlockTable>(&s.pipeline->allocator());
  return true;
}

void Scheduler::ReleaseHeldBackPages(bool reconnected) {
  State& s = *state_;
  int after_loss = 0;
  std::erase_if(s.held_back, [&](const State::HeldBack& held) {
    if (held.fence <= s.worker_collected) return true;
    if (!reconnected || held.fence != State::kUntilReconnect) return false;
    after_loss += held.table->n_pages();
    return true;
  });
  if (after_loss > 0) {
    std::fprintf(stderr,
                 "scheduler: %d pages the lost prefill worker may have been writing are free "
                 "again (its session has ended)\n",
                 after_loss);
  }
}

}  // namespace shardlm
