// Scheduler slots, engine thread: retained sequences, and the save and restore tasks that
// move a slot's pages a few per step (see scheduler_slots.h and scheduler.h "Slots").
#include "runtime/scheduler_slots.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "runtime/scheduler.h"
#include "runtime/scheduler_impl.h"
#include "runtime/scheduler_prefix_cache.h"
#include "runtime/scheduler_request.h"

namespace shardlm {
namespace {

const char* BusyReason(const SchedulerSlot& slot) {
  if (slot.request) return "processing a request";
  return slot.task == SlotState::kSaving ? "being saved" : "being restored";
}

}  // namespace

void Scheduler::RetainSequence(SchedulerSlot& slot, const ActiveRequest& request) {
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
  slot.retained_fence = 0;
}

void Scheduler::DropAllSlotState(const Status& error) {
  State& s = *state_;
  while (!s.slot_tasks.empty()) {
    FinishSlotTask(s.slot_tasks.front(), error);
    s.slot_tasks.pop_front();
  }
  for (SchedulerSlot& slot : s.slots) DropRetained(slot);
  PublishStats();
}

void Scheduler::StartSlotJob(std::shared_ptr<SlotJob> job) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[size_t(job->slot)];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_.ok()) return job->done.set_value(lost_);
  }
  if (!State::Admissible(slot)) {
    return job->done.set_value(Conflict("slot {} is {}: try again once it is idle (GET /slots)",
                                        job->slot, BusyReason(slot)));
  }
  SlotTask task;
  task.job = std::move(job);
  Status started;
  switch (task.job->op) {
    case SlotJob::Op::kErase:
      task.result.n_tokens = int(slot.retained_tokens.size());
      DropRetained(slot);
      break;
    case SlotJob::Op::kSave:
      started = StartSave(slot, task);
      break;
    case SlotJob::Op::kRestore:
      started = StartRestore(slot, task);
      break;
  }
  if (task.job->op == SlotJob::Op::kErase || !started.ok()) {
    FinishSlotTask(task, started);
  } else {
    s.slot_tasks.push_back(std::move(task));
    PublishStats();
  }
}

Status Scheduler::StartSave(SchedulerSlot& slot, SlotTask& task) {
  State& s = *state_;
  if (slot.retained_tokens.empty()) {
    return InvalidArgument("slot {} holds no tokens: nothing to save (run a request in it first)",
                           task.job->slot);
  }
  task.pages = slot.retained->pages();
  for (PageId page : task.pages) s.pipeline->allocator().Retain(page);
  task.fence = slot.retained_fence;
  task.result.tokens = slot.retained_tokens;
  task.result.n_tokens = int(task.result.tokens.size());
  task.result.stage_bytes = s.pipeline->page_bytes();
  for (size_t& bytes : task.result.stage_bytes) {
    bytes *= task.pages.size();
    task.result.stage_pages.push_back(std::make_unique_for_overwrite<uint8_t[]>(bytes));
  }
  slot.task = SlotState::kSaving;
  return Status::Ok();
}

// The slot's retained sequence goes first: a restore replaces it, and its pages make room.
Status Scheduler::StartRestore(SchedulerSlot& slot, SlotTask& task) {
  State& s = *state_;
  PageAllocator& allocator = s.pipeline->allocator();
  const SlotImage& image = task.job->source->image;
  DropRetained(slot);
  while (int(task.pages.size()) < image.n_pages) {
    Result<PageId> page = allocator.Allocate();
    if (!page.ok() && s.prefix_cache->Evict(image.n_pages - int(task.pages.size())) > 0) {
      page = allocator.Allocate();
    }
    if (!page.ok()) {
      return OutOfRange(
          "restoring {} tokens needs {} free KV pages, {} could be found: retry "
          "once running requests finish",
          image.tokens.size(), image.n_pages, task.pages.size());
    }
    task.pages.push_back(*page);
  }
  // A page freed by a finished sequence may still be written by its last batch.
  task.fence = s.batches_submitted;
  task.result.n_tokens = int(image.tokens.size());
  slot.task = SlotState::kRestoring;
  return Status::Ok();
}

bool Scheduler::SlotTaskAction() {
  State& s = *state_;
  int budget = kSlotPagesPerStep;
  for (auto it = s.slot_tasks.begin(); it != s.slot_tasks.end() && budget > 0;) {
    SlotTask& task = *it;
    if (s.collected() < task.fence) {
      ++it;
      continue;
    }
    const Status status = StepSlotTask(task, budget);
    if (status.ok() && task.next_page < int(task.pages.size())) {
      ++it;
      continue;
    }
    if (status.ok() && task.job->op == SlotJob::Op::kRestore) CommitRestore(task);
    FinishSlotTask(task, status);
    it = s.slot_tasks.erase(it);
  }
  return false;  // bounded work: the step goes on to admit, submit and collect
}

Status Scheduler::StepSlotTask(SlotTask& task, int& budget) {
  Pipeline& pipeline = *state_->pipeline;
  const int n = std::min(budget, int(task.pages.size()) - task.next_page);
  const std::span<const PageId> pages(task.pages.data() + task.next_page, size_t(n));
  const std::vector<size_t> page_bytes = pipeline.page_bytes();
  budget -= n;
  if (task.job->op == SlotJob::Op::kSave) {
    std::vector<uint8_t*> dst;
    for (size_t st = 0; st < page_bytes.size(); ++st) {
      dst.push_back(task.result.stage_pages[st].get() + size_t(task.next_page) * page_bytes[st]);
    }
    SHARDLM_TRY(pipeline.ExportPages(pages, dst));
  } else {
    const SlotImage& image = task.job->source->image;
    std::vector<const uint8_t*> src;
    for (size_t st = 0; st < page_bytes.size(); ++st) {
      src.push_back(image.stage_pages[st].data() + size_t(task.next_page) * page_bytes[st]);
    }
    SHARDLM_TRY(pipeline.ImportPages(pages, src));
  }
  task.next_page += n;
  return Status::Ok();
}

// The imported pages become the slot's retained sequence; its full pages join the prefix
// cache (or are swapped for the cached copy of their block).
void Scheduler::CommitRestore(SlotTask& task) {
  State& s = *state_;
  SchedulerSlot& slot = s.slots[size_t(task.job->slot)];
  const std::vector<TokenId>& tokens = task.job->source->image.tokens;
  s.prefix_cache->AdoptRestored(tokens, task.pages);
  const int page_tokens = s.pipeline->allocator().page_tokens();
  for (size_t i = 0; i < task.pages.size(); ++i) {
    const int n = std::min(page_tokens, int(tokens.size()) - int(i) * page_tokens);
    slot.retained->AppendPage(task.pages[i], n);
  }
  slot.retained_tokens = tokens;
  slot.retained_fence = 0;  // nothing in flight writes the imported pages
}

void Scheduler::FinishSlotTask(SlotTask& task, Status status) {
  State& s = *state_;
  for (PageId page : task.pages) s.pipeline->allocator().Release(page);
  task.pages.clear();
  s.slots[size_t(task.job->slot)].task = SlotState::kIdle;
  PublishStats();  // before the answer: the caller may look at Slots() right after
  if (status.ok()) {
    task.job->done.set_value(std::move(task.result));
  } else {
    task.job->done.set_value(std::move(status));
  }
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
