// Scheduler slots, engine thread: retained sequences, the slot jobs, and the copies that move
// a transfer's pages a few per step (see scheduler_slots.h and scheduler.h "Slots").
#include "engine/scheduler_slots.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_impl.h"
#include "engine/scheduler_prefix_cache.h"
#include "engine/scheduler_request.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"

namespace shardlm {
namespace {

const char* BusyReason(const SchedulerSlot& slot) {
  if (slot.request) return "processing a request";
  return slot.task == SlotState::kSaving ? "being saved" : "being restored";
}

void Answer(SlotJob& job, Result<SlotJobResult> result) { job.done.set_value(std::move(result)); }

}  // namespace

void Scheduler::RetainSequence(SchedulerSlot& slot, const ActiveRequest& request) {
  if (state_->pager != nullptr && slot.n_committed > 0) {
    const int slot_idx = int(&slot - state_->slots.data());
    const int page_tokens = state_->pipeline->allocator().page_tokens();
    slot.retained_selection =
        state_->pager->Record(slot_idx, (slot.n_committed + page_tokens - 1) / page_tokens);
  }
  *slot.retained = std::move(*slot.table);
  slot.retained->Truncate(slot.n_committed);
  slot.retained_tokens.resize(size_t(slot.n_committed));
  for (int pos = 0; pos < slot.n_committed; ++pos) {
    slot.retained_tokens[size_t(pos)] = request.TokenAt(pos);
  }
  slot.retained_fence = state_->batches_submitted;
}

void Scheduler::DropRetained(SchedulerSlot& slot) {
  slot.retained->Clear();
  slot.retained_tokens.clear();
  slot.retained_selection.reset();
  slot.retained_fence = 0;
}

void Scheduler::DropAllSlotState(const Status& error) {
  State& s = *state_;
  for (SlotCopyTask& task : s.slot_tasks) Answer(*task.job, error);
  s.slot_tasks.clear();
  for (SchedulerSlot& slot : s.slots) {
    if (slot.task != SlotState::kIdle && slot.transfer.failed.ok()) {
      ReleaseTransferPages(slot.transfer);
      slot.transfer.failed = error;
    }
    DropRetained(slot);
  }
  PublishStats();
}

void Scheduler::StartSlotJob(std::shared_ptr<SlotJob> job) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[size_t(job->slot)];
  SlotJob& j = *job;
  const bool begins = j.op == SlotJob::Op::kErase || j.op == SlotJob::Op::kSaveBegin ||
                      j.op == SlotJob::Op::kRestoreBegin;
  if (begins) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!lost_.ok()) return Answer(j, lost_);
    }
    if (!State::Admissible(slot)) {
      return Answer(j, Conflict("slot {} is {}: try again once it is idle (GET /slots)", j.slot,
                                BusyReason(slot)));
    }
  } else if (slot.task == SlotState::kIdle) {
    return Answer(j, Status(StatusCode::kInternal,
                            fmt::format("slot {} has no save or restore in progress", j.slot)));
  }
  switch (j.op) {
    case SlotJob::Op::kErase: {
      SlotJobResult erased;
      erased.n_tokens = int(slot.retained_tokens.size());
      DropRetained(slot);
      PublishStats();
      return Answer(j, std::move(erased));
    }
    case SlotJob::Op::kSaveBegin:
      return Answer(j, BeginSave(slot, j.slot));
    case SlotJob::Op::kRestoreBegin:
      slot.transfer = SlotTransfer{};
      slot.task = SlotState::kRestoring;
      PublishStats();
      return Answer(j, SlotJobResult{});
    case SlotJob::Op::kRestoreAllocate:
      return Answer(j, AllocateRestore(slot, j.n_pages));
    case SlotJob::Op::kCopy:
      if (!slot.transfer.failed.ok()) return Answer(j, slot.transfer.failed);
      if (j.first_page < 0 || j.n_pages < 1 || j.n_pages > kSlotChunkPages ||
          j.first_page > int(slot.transfer.pages.size()) - j.n_pages ||
          j.stage_buffers.size() != s.pipeline->page_bytes().size() ||
          (!j.state_buffer.empty() && slot.task != SlotState::kSaving)) {
        return Answer(j, Status(StatusCode::kInternal,
                                fmt::format("slot {}: a copy of pages [{}, +{}) out of {}", j.slot,
                                            j.first_page, j.n_pages, slot.transfer.pages.size())));
      }
      s.slot_tasks.push_back(SlotCopyTask{std::move(job)});
      return;
    case SlotJob::Op::kEnd:
      return Answer(j, EndTransfer(slot, j));
  }
}

Result<SlotJobResult> Scheduler::BeginSave(SchedulerSlot& slot, int slot_idx) {
  State& s = *state_;
  if (slot.retained_tokens.empty()) {
    return InvalidArgument("slot {} holds no tokens: nothing to save (run a request in it first)",
                           slot_idx);
  }
  slot.transfer = SlotTransfer{};
  slot.transfer.pages = slot.retained->pages();
  for (PageId page : slot.transfer.pages) s.pipeline->allocator().Retain(page);
  slot.transfer.fence = slot.retained_fence;
  slot.task = SlotState::kSaving;
  PublishStats();
  SlotJobResult begun;
  begun.tokens = slot.retained_tokens;
  begun.selection = slot.retained_selection;
  begun.n_tokens = int(begun.tokens.size());
  return begun;
}

// Fresh pages only: the slot's retained sequence keeps its pages until the commit.
Result<SlotJobResult> Scheduler::AllocateRestore(SchedulerSlot& slot, int n_pages) {
  State& s = *state_;
  SlotTransfer& transfer = slot.transfer;
  if (!transfer.failed.ok()) return transfer.failed;
  if (slot.task != SlotState::kRestoring || !transfer.pages.empty() || n_pages < 1) {
    return Status(StatusCode::kInternal, "a restore allocates its pages once");
  }
  PageAllocator& allocator = s.pipeline->allocator();
  while (int(transfer.pages.size()) < n_pages) {
    Result<PageId> page = allocator.Allocate();
    if (!page.ok() && s.prefix_cache->Evict(n_pages - int(transfer.pages.size())) > 0) {
      page = allocator.Allocate();
    }
    if (!page.ok()) {
      const int found = int(transfer.pages.size());
      ReleaseTransferPages(transfer);
      return OutOfRange(
          "the sequence needs {} free KV pages, {} could be found (the slot keeps its own "
          "sequence until the restore succeeds): retry once running requests finish, or erase "
          "a slot's sequence first",
          n_pages, found);
    }
    transfer.pages.push_back(*page);
  }
  // A page freed by a finished sequence may still be written by its last batch.
  transfer.fence = s.batches_submitted;
  PublishStats();
  return SlotJobResult{};
}

Result<SlotJobResult> Scheduler::EndTransfer(SchedulerSlot& slot, SlotJob& job) {
  SlotJobResult ended;
  Status status = slot.transfer.failed;
  if (slot.task == SlotState::kRestoring && job.commit && status.ok()) {
    const int page_tokens = state_->pipeline->allocator().page_tokens();
    const size_t n_pages = (job.tokens.size() + size_t(page_tokens) - 1) / size_t(page_tokens);
    if (job.tokens.empty() || n_pages != slot.transfer.pages.size()) {
      status =
          Status(StatusCode::kInternal, fmt::format("{} tokens to commit over {} restored pages",
                                                    job.tokens.size(), slot.transfer.pages.size()));
    } else {
      status = CommitRestore(slot, job);
      ended.n_tokens = int(slot.retained_tokens.size());
    }
  }
  ReleaseTransferPages(slot.transfer);
  slot.transfer = SlotTransfer{};
  slot.task = SlotState::kIdle;
  PublishStats();  // before the answer: the caller may look at Slots() right after
  if (!status.ok()) return status;
  return ended;
}

bool Scheduler::SlotTaskAction() {
  State& s = *state_;
  int budget = kSlotPagesPerStep;
  for (auto it = s.slot_tasks.begin(); it != s.slot_tasks.end() && budget > 0;) {
    SlotCopyTask& task = *it;
    const SlotTransfer& transfer = s.slots[size_t(task.job->slot)].transfer;
    if (s.collected() < transfer.fence) {
      ++it;
      continue;
    }
    const Status status = StepSlotCopy(task, budget);
    if (status.ok() && task.n_copied < task.job->n_pages) {
      ++it;
      continue;
    }
    if (status.ok()) {
      Answer(*task.job, SlotJobResult{});
    } else {
      Answer(*task.job, status);
    }
    it = s.slot_tasks.erase(it);
  }
  return false;  // bounded work: the step goes on to admit, submit and collect
}

Status Scheduler::StepSlotCopy(SlotCopyTask& task, int& budget) {
  Pipeline& pipeline = *state_->pipeline;
  const SlotJob& job = *task.job;
  const SchedulerSlot& slot = state_->slots[size_t(job.slot)];
  int n = std::min(budget, job.n_pages - task.n_copied);
  const PageId* first = slot.transfer.pages.data() + job.first_page + task.n_copied;
  Pager* pager = state_->pager.get();
  if (slot.task != SlotState::kSaving && pager != nullptr) {
    // Up to the first page whose last free is still in flight (see Pager::ReadyToImport).
    for (int i = 0; i < n; ++i) {
      if (!pager->ReadyToImport(first[i], state_->collected())) {
        n = i;
        break;
      }
    }
    if (n == 0) return Status::Ok();  // the next step goes on
  }
  const std::span<const PageId> pages(first, size_t(n));
  const std::vector<size_t> page_bytes = pipeline.page_bytes();
  if (!job.state_buffer.empty() && task.n_copied == 0) {
    SHARDLM_TRY(ExportRetainedState(job.slot, job.state_buffer));
  }
  budget -= n;
  std::vector<uint8_t*> buffers;
  for (size_t st = 0; st < page_bytes.size(); ++st) {
    buffers.push_back(job.stage_buffers[st] + size_t(task.n_copied) * page_bytes[st]);
  }
  if (slot.task == SlotState::kSaving) {
    SHARDLM_TRY(pipeline.ExportPages(pages, buffers));
  } else {
    const std::vector<const uint8_t*> src(buffers.begin(), buffers.end());
    SHARDLM_TRY(pipeline.ImportPages(pages, src));
  }
  task.n_copied += n;
  return Status::Ok();
}

// The slot's recurrent state after its retained sequence's last whole page: the export
// RememberSequence makes when a sequence ends, so a restored file resumes where the sequence
// would have. The slot's state stays its retained sequence's until the slot takes another
// request (a restore imports the file's), and the copy runs once the batches in flight at
// the sequence's end are collected, so the state is still there unless a cancelled
// request's last batch ran on past the next page boundary.
Status Scheduler::ExportRetainedState(int slot_idx, std::span<uint8_t> dst) {
  Pipeline& pipeline = *state_->pipeline;
  const SchedulerSlot& slot = state_->slots[size_t(slot_idx)];
  const int page_tokens = pipeline.allocator().page_tokens();
  const int32_t position = int32_t(slot.retained_tokens.size()) / page_tokens * page_tokens;
  const Status exported = pipeline.ExportState(slot_idx, position, dst);
  if (exported.code() != StatusCode::kNotFound) return exported;
  return Unsupported(
      "slot {} no longer holds its recurrent state at its last whole page (position {}; a "
      "cancelled request's last batch may have run past it), so its sequence cannot be saved: "
      "{}",
      slot_idx, position, exported.message());
}

// The imported pages become the slot's retained sequence; its full pages join the prefix
// cache (or are swapped for the cached copy of their block). The file's recurrent state goes
// two ways: into the prefix cache, kept for the last full block exactly as a finished
// sequence's is, because the next turn may be admitted into any slot and resumes a recurrent
// model only from a kept state; and into the slot itself, because the slot's state must stay
// its retained sequence's for a later save of the slot to export it.
Status Scheduler::CommitRestore(SchedulerSlot& slot, SlotJob& job) {
  State& s = *state_;
  const int slot_idx = int(&slot - s.slots.data());
  const int page_tokens = s.pipeline->allocator().page_tokens();
  if (!job.state.empty()) {
    const int32_t position = int32_t(job.tokens.size()) / page_tokens * page_tokens;
    const Status imported = s.pipeline->ImportState(slot_idx, position, job.state);
    if (!imported.ok()) {
      // Some stages may hold the file's state now: the retained sequence is no longer theirs.
      DropRetained(slot);
      return imported.WithContext("importing the slot file's recurrent state");
    }
  }
  DropRetained(slot);
  std::vector<PageId>& pages = slot.transfer.pages;
  s.prefix_cache->AdoptRestored(job.tokens, pages, job.selection ? &*job.selection : nullptr,
                                job.state);
  for (size_t i = 0; i < pages.size(); ++i) {
    const int n = std::min(page_tokens, int(job.tokens.size()) - int(i) * page_tokens);
    slot.retained->AppendPage(pages[i], n);
  }
  slot.retained_tokens = std::move(job.tokens);
  slot.retained_selection = std::move(job.selection);
  slot.retained_fence = 0;  // nothing in flight writes the imported pages
  return Status::Ok();
}

void Scheduler::ReleaseTransferPages(SlotTransfer& transfer) {
  for (PageId page : transfer.pages) state_->pipeline->allocator().Release(page);
  transfer.pages.clear();
}

int Scheduler::CountRetainedOnly() {
  State& s = *state_;
  std::vector<uint8_t>& marks = s.page_marks;  // all 0 between calls
  for (const SchedulerSlot& slot : s.slots) {
    if (slot.request) {
      for (PageId page : slot.table->pages()) marks[size_t(page)] = 1;
    }
  }
  int n = 0;
  for (const SchedulerSlot& slot : s.slots) {
    for (PageId page : slot.retained->pages()) {
      if (marks[size_t(page)] == 0) ++n;
      marks[size_t(page)] = 2;
    }
  }
  for (const SchedulerSlot& slot : s.slots) {
    for (PageId page : slot.table->pages()) marks[size_t(page)] = 0;
    for (PageId page : slot.retained->pages()) marks[size_t(page)] = 0;
  }
  return n;
}

}  // namespace shardlm
