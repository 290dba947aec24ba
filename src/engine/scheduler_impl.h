// Scheduler internals: the engine thread's state (slots, waiting requests, batches in
// flight, prefix cache, slot tasks, counters), shared by scheduler.cc (instructions,
// actions, faults, stats), scheduler_checks.cc (a request's checks against the pager),
// scheduler_batch.cc (building, submitting and collecting batches) and scheduler_slots.cc
// (retained sequences, slot save/restore transfers).
//
// Goals: one definition of what the engine thread owns; no logic beyond small helpers.
// Non-goals: anything other threads may see (that lives in Scheduler, guarded by mu_).
//
// Thread safety: every type here belongs to the engine thread alone.
// Lifetime: State is owned by the Scheduler; see State for the destruction order.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_disk_cache.h"
#include "engine/scheduler_prefix_cache.h"
#include "engine/scheduler_request.h"
#include "engine/scheduler_slots.h"
#include "grammar/automaton_cache.h"
#include "kv/block_table.h"
#include "kv/pager.h"
#include "pipeline/remote_stage.h"

namespace shardlm {

// What a resumable task (a prompt's prefill) reports after being offered a step.
enum class TaskState { kFinished, kNotFinished, kBlocked };

// Where a prompt is prefilled (scheduler.h "Prefill worker"): decided when its first chunk is
// scheduled, then kept until the slot takes its next request.
enum class PrefillRoute { kUndecided, kLocal, kWorker };

// One sequence slot: the batch's slot index is the index in State::slots.
struct SchedulerSlot {
  std::unique_ptr<ActiveRequest> request;  // null when free
  std::unique_ptr<BlockTable> table;       // the running request's KV; empty when free
  uint64_t admit_seq = 0;                  // admission order: older prefills go first
  // A batch in flight gives what the request waits for: its next logits row, or the
  // outputs of its last prompt positions.
  bool awaiting_logits = false;
  int write_begin = 0;  // positions [write_begin, write_end) of the batch being built
  int write_end = 0;    // (write_end 0: none)
  int n_committed = 0;  // positions [0, n) of the request hold KV in every stage (collected)
  // Retained sequence (engine.h "Slots"): while free, the last request's committed
  // positions, or a restored sequence; dropped when the slot takes a request.
  std::unique_ptr<BlockTable> retained;
  std::vector<TokenId> retained_tokens;             // token of each retained position
  std::optional<PageSelection> retained_selection;  // the bounded pool's memory of them
  uint64_t retained_fence = 0;        // batches [0, fence) may write retained pages until collected
  SlotState task = SlotState::kIdle;  // kSaving / kRestoring: a slot transfer holds the slot
  SlotTransfer transfer;              // while task is kSaving or kRestoring
  PrefillRoute route = PrefillRoute::kUndecided;
  // Worker batches [0, fence) may write the slot's pages until collected (State::worker_*).
  uint64_t worker_fence = 0;
};

// A submitted batch: whose output rows it will give, in batch order. The request id guards
// against a slot that was finished and reused while the batch was in flight.
struct Scheduler::InFlight {
  // One request's entries of the batch (adjacent, so its rows are too): its logits rows
  // (prompt positions' rows first, then the row it samples from) and its embedding rows.
  struct Outputs {
    int slot = 0;
    RequestId request = 0;
    int first_position = 0;       // of the request's first entry in the batch
    int n_prompt_logit_rows = 0;  // positions first_position.. (PromptOutputs)
    int n_embedding_rows = 0;     // positions first_position..
    bool sample = false;          // one more logits row: the next token's
    bool prompt_done = false;     // the batch holds the request's last prompt position
    int n_logit_rows() const { return n_prompt_logit_rows + (sample ? 1 : 0); }
  };
  std::vector<Outputs> outputs;
  // Per slot the batch writes: positions [0, end) hold KV once the batch is collected.
  struct Written {
    int slot = 0;
    RequestId request = 0;
    int end = 0;
  };
  std::vector<Written> written;
  // Bounded KV pool: the entries that asked for page scores, in batch order, and how many
  // pages each scored.
  struct Scored {
    int slot = 0;
    RequestId request = 0;
    size_t n_pages = 0;
  };
  std::vector<Scored> scored;
};

// Declaration order is destruction order reversed: tables, the prefix cache and the disk
// cache (which exports what is queued) go before the pipeline (whose allocator they
// release pages into).
struct Scheduler::State {
  std::unique_ptr<Pipeline> pipeline;
  // Bounded KV pool only. The allocator's free hook calls it: it goes after every table.
  std::unique_ptr<Pager> pager;
  // Prefill worker (null without one): one remote stage of every layer whose pool is laid over
  // the local stage's pages (asynchronous; its own allocator is unused: pages come from
  // pipeline's). Declared after `pipeline`, whose shared region it names, so it goes first;
  // held-back tables go before the pager too.
  std::unique_ptr<Pipeline> worker;
  RemoteStage* worker_stage = nullptr;    // its one stage
  std::deque<InFlight> worker_in_flight;  // submission order
  uint64_t worker_submitted = 0;
  uint64_t worker_collected = 0;
  Status worker_lost;  // the worker is down: why (Ok while it serves)
  std::chrono::steady_clock::time_point worker_last_reconnect;
  // Tables of finished requests that a worker batch may still write: released once
  // worker_collected reaches the fence (kUntilReconnect: once the worker is back).
  struct HeldBack {
    uint64_t fence = 0;
    std::unique_ptr<BlockTable> table;
    int slot = 0;  // a bounded pool keeps the slot's frames too: no request is admitted there
  };
  static constexpr uint64_t kUntilReconnect = UINT64_MAX;
  std::deque<HeldBack> held_back;
  // Bounded pool: the worker batch whose pages the decode pipeline is moving (its batch number
  // `after`), sent to the worker once that batch is collected: its own copy of the batch, the
  // frame of each page it reads or writes, as the pager placed them.
  struct WorkerMoving {
    uint64_t after = 0;
    std::vector<BatchEntry> entries;
    std::vector<std::vector<PageId>> pages;
    std::vector<std::vector<PageId>> frames;
    std::vector<std::vector<int32_t>> attended;
  };
  std::optional<WorkerMoving> worker_moving;
  std::vector<uint8_t> handoff_state;  // scratch of MoveState
  int64_t worker_handoffs = 0;
  int64_t worker_tokens = 0;
  int64_t worker_state_bytes = 0;
  int64_t worker_failed_requests = 0;
  int worker_min_tokens = 0;                       // SchedulerOptions::disagg_min_tokens
  std::unique_ptr<SchedulerDiskCache> disk_cache;  // null without options.kv_cache_dir
  // Declared before the prefix cache, which refers to it.
  std::unique_ptr<RecurrentCheckpoints> recurrent;     // disabled without recurrent layers
  std::unique_ptr<SchedulerPrefixCache> prefix_cache;  // a null object when disabled
  std::vector<SchedulerSlot> slots;
  std::vector<PageList> pages_by_slot;                 // [slot] → its pages, per batch
  std::vector<AttendedPages> attended_by_slot;         // [slot] → its read pages, per batch
  std::deque<std::unique_ptr<ActiveRequest>> waiting;  // admitted in this order
  std::deque<InFlight> in_flight;                      // submission order
  std::deque<SlotCopyTask> slot_tasks;                 // slot transfers' copies, queued order
  std::vector<BatchEntry> batch;
  std::vector<PageCopy> copies;
  std::chrono::steady_clock::time_point last_reconnect;
  uint64_t admit_counter = 0;
  int64_t requests_total = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generated_tokens_total = 0;
  int64_t prompt_tokens_computed = 0;
  uint64_t batches_submitted = 0;
  int disk_page_budget = 0;         // disk page loads left in the batch being built
  int prompt_logit_budget = 0;      // prompt logits rows left in the batch being built
  std::vector<uint8_t> page_marks;  // [page id], scratch of CountRetainedOnly
  // Token automata of the grammars requests ask for, per vocabulary (Scheduler::Vocabulary
  // keeps each alive; made on the first constrained request over it).
  std::map<const grammar::TokenVocabulary*, std::unique_ptr<grammar::AutomatonCache>> automata;

  uint64_t collected() const { return batches_submitted - in_flight.size(); }
  // A request may be admitted into the slot: it runs nothing and no slot task holds it.
  static bool Admissible(const SchedulerSlot& slot) {
    return !slot.request && slot.task == SlotState::kIdle;
  }
  // Under a bounded pool a held-back table keeps its slot's frames in use (a worker batch may
  // still write them), so the slot takes no request until it is released.
  bool HoldsBack(int slot_idx) const {
    return pager != nullptr && std::any_of(held_back.begin(), held_back.end(),
                                           [&](const HeldBack& h) { return h.slot == slot_idx; });
  }
  // Whether the engine thread has anything to do without a new instruction.
  bool HasWork() const;
  // Whether the prompt in the slot should prefill on the worker: it is up, the request only
  // samples (no prompt logits or embeddings), nothing loads from disk for it and at least
  // worker_min_tokens of its prompt are left to compute.
  bool WorkerCandidate(int slot_idx) const;
  // Worker batches in flight at most.
  int WorkerDepth() const;
  // The slot's prompt prefills (or will) on the worker and nothing can be sent for it now.
  bool WaitsForWorker(int slot_idx) const;
  // Copies the slot's recurrent and window state at `position` from one pipeline to the other
  // (the engine's and the worker's), counted in worker_state_bytes; Ok at once without state.
  Status MoveState(Pipeline& from, Pipeline& to, int slot_idx, int position);

  // Offers a prefilling request up to `budget` batch entries; appends its chunk.
  TaskState PrefillStep(int slot_idx, int& budget, InFlight& record);
  // Bounded KV pool: the batch's last entry, which leaves the slot with n_positions, asks the
  // stages for page scores when the pager wants them (recorded for the collection).
  void AskPageScores(int slot_idx, RequestId request, int n_positions, bool prompt_end,
                     InFlight& record);
  // Marks positions [begin, end) of the slot as written by the batch being built.
  void Touch(SchedulerSlot& slot, int begin, int end);
  // PrepareWrite, evicting unreferenced cached pages when the pool is full.
  Status PrepareWriteWithRoom(SchedulerSlot& slot);
};

}  // namespace shardlm
