// Stage: one contiguous layer range of a model and the device that computes it — the unit a
// Pipeline chains.
//
// A stage owns its weights (only its layers' bytes are touched), its KV page storage and
// its compute (a pinned core set for a local stage; a `shardlm shard` daemon for a remote
// one). Page ids are the pipeline's: one PageAllocator hands them out and every stage
// stores the same logical page under the same id, so a sequence's page list is valid in
// every stage and block tables are shared logically across stages.
//
// Goals: one interface for local and remote stages, so the pipeline and the scheduler never
// care where a stage runs; a dead remote stage is a Status (kUnavailable), never a crash.
// Non-goals: choosing layer ranges (placement.h), ordering batches across stages
// (pipeline.h), page allocation (kv/page_allocator.h).
//
// Thread safety: one thread calls Run at a time (the pipeline's worker for this stage);
// info, Health and Stats may be called from any thread; page_bytes, ExportPages and
// ImportPages too (see there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "ipc/shm_region.h"
#include "kv/page_pool.h"
#include "kv/page_residency.h"
#include "kv/paging.h"
#include "model/forward.h"
#include "model/weights.h"

namespace shardlm {

// What a stage is asked to compute: the batch plus the pages it reads and writes.
struct StageBatch {
  std::span<const BatchEntry> entries;
  // [slot] → the slot's pages (logical index → page id), for every slot an entry names;
  // covers each entry's position. Slots no entry names may be empty.
  std::span<const PageList> pages_by_slot;
  // Applied in order, before the forward pass (copy-on-write of shared pages).
  std::span<const PageCopy> copies;
  // Bounded KV pool only (kv/pager.h): the moves applied before the copies, each slot's
  // attended logical pages ([slot]; empty: no pool, every page) and the scores of the
  // entries with score_pages (in batch order, pages_by_slot[slot].size() floats each; each
  // stage raises them to its own where higher, so the caller starts them at -infinity).
  const PagingOps* paging = nullptr;
  std::span<const AttendedPages> attended_by_slot = {};
  std::span<float> page_scores = {};
  // Bounded KV pool: where the stage reports pages its tier failed to move (the batch still
  // runs; the engine ends the sequences that hold them). Null: no pool.
  PagingLoss* loss = nullptr;
  // Bounded KV pool with a prefill worker, which computes over the decode stages' frames:
  //  - apply_only (to a decode stage): apply the moves and copies and count the pages the
  //    entries write as written, but compute nothing; the worker computes the batch next.
  //  - frames_by_slot (to the worker's stage): [slot] → the frame of each of the slot's pages
  //    (kNoPage: not read), as the decode stages' paging left them; the worker moves nothing.
  bool apply_only = false;
  std::span<const PageList> frames_by_slot = {};
};

// Where a stage computes and what it holds: what `GET /props` shows.
struct StageInfo {
  int index = 0;
  LayerRange layers;
  bool first = false;  // embeds token ids
  bool last = false;   // output norm + LM head: gives logits rows
  std::string device;  // "cpu", "cpu:0-3", "unix:/run/shardlm/s1.sock"
  bool remote = false;
  int threads = 0;
  size_t weight_bytes = 0;  // bytes of the tensors the stage computes with
  size_t kv_bytes = 0;      // its page storage
  // Its windowed layers' rings (kv/window_ring.h), per sequence that uses them: allocated when a
  // slot first runs, beside the page storage.
  size_t ring_bytes_per_sequence = 0;
};

struct StageStats {
  uint64_t batches = 0;
  uint64_t tokens = 0;
  double busy_seconds = 0.0;  // inside Run
  uint64_t bytes_in = 0;      // activation bytes received (hidden rows)
  uint64_t bytes_out = 0;     // hidden, logits or embedding bytes produced
  ResidencyStats paging;      // bounded KV pool only
};

class Stage {
 public:
  virtual ~Stage() = default;

  virtual const StageInfo& info() const = 0;

  // Applies batch.copies, then runs the stage's layers over batch.entries.
  //  - hidden_in: nullptr on the first stage, else [entries.size()][n_embd] floats.
  //  - out: last stage: logits [rows that want logits][n_vocab] in batch order, then
  //    embedding rows [rows that want their embedding][n_embd] (ForwardPass::Run); other
  //    stages: hidden rows [entries.size()][n_embd].
  // Errors: those of ForwardPass::Run; kUnavailable when a remote stage is unreachable
  // (the stage then reports it through Health until Reconnect succeeds).
  virtual Status Run(const StageBatch& batch, const float* hidden_in, float* out) = 0;

  // Ok, or kUnavailable naming the stage, its device and what went wrong.
  virtual Status Health() const = 0;

  // Brings a lost stage back (remote: connect + handshake again). Its pages are empty
  // afterwards: the caller must have dropped every sequence. Ok and a no-op when healthy.
  virtual Status Reconnect() = 0;

  virtual StageStats Stats() const = 0;

  // The shared-memory region its pages live in (LocalStageOptions::share_kv), which a prefill
  // worker maps to write them; null when they are private to the stage.
  virtual const ShmRegion* shared_kv() const { return nullptr; }

  // KV page transfer: the prefix cache's disk tier and slot save/restore move a stage's
  // part of a page through these. A page's bytes are the stage's PagePool layout over its
  // own layers, page_bytes() long.
  virtual size_t page_bytes() const = 0;
  // Copies the pages' contents, page_bytes() each in order, into dst (Export) or from src
  // into the stage's pool (Import). May be called from any thread while batches run, for
  // pages no batch in flight writes or reads: exported pages are full pages that nothing
  // writes again (published cache pages), imported ones are pages no batch has named yet.
  // Errors: a page outside the pool (InvalidArgument, nothing copied); kUnavailable for a
  // lost remote stage.
  virtual Status ExportPages(std::span<const PageId> pages, uint8_t* dst) = 0;
  virtual Status ImportPages(std::span<const PageId> pages, const uint8_t* src) = 0;

  // Recurrent state (the stage's recurrent layers, kv/recurrent_state.h): what a prefix of
  // whole pages resumes from besides its pages. state_bytes(): one slot's state in this stage
  // (0: the stage has no recurrent layer). ExportState copies the slot's state at `position`
  // (its live state, or its checkpoint at the last page boundary) into dst; NotFound when the
  // slot holds neither. ImportState makes src, a state at `position`, the slot's live state.
  // Called between the slot's batches (a local stage serializes them with Run).
  virtual size_t state_bytes() const { return 0; }
  virtual Status ExportState(int32_t /*slot*/, int32_t /*position*/, uint8_t* /*dst*/) {
    return InvalidArgument("stage {} has no recurrent layers", info().index);
  }
  virtual Status ImportState(int32_t /*slot*/, int32_t /*position*/, const uint8_t* /*src*/) {
    return InvalidArgument("stage {} has no recurrent layers", info().index);
  }
};

// Calls move(stage, offset) for each of `stages` with a recurrent state, in order, offset being
// where its part starts in the states laid end to end (how a pipeline and a StageChain lay out
// one slot's state).
inline Status ForEachStageState(std::span<const std::unique_ptr<Stage>> stages,
                                const std::function<Status(Stage&, size_t)>& move) {
  size_t offset = 0;
  for (const auto& stage : stages) {
    if (stage->state_bytes() == 0) continue;
    SHARDLM_TRY(move(*stage, offset));
    offset += stage->state_bytes();
  }
  return Status::Ok();
}

}  // namespace shardlm
