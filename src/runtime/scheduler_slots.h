// Scheduler slots (`/slots` save, restore, erase): what a caller thread hands the engine
// thread, and the resumable tasks that move a slot's KV pages on the engine thread.
//
// A job's life:
//   - The caller (an HTTP handler, scheduler_slot_files.cc) checks the slot id and, for a
//     restore, reads and validates the whole file first, so a bad file changes nothing.
//     It queues a SlotJob as an instruction and waits for its promise.
//   - The engine thread (scheduler_slots.cc) starts it: a slot that runs a request or
//     another job answers kConflict at once; erase drops the retained sequence at once; a
//     save or restore becomes a SlotTask that holds the slot (admission skips it) and a
//     reference on every page it moves.
//   - Each engine step offers the tasks kSlotPagesPerStep page copies in all (STYLE rule
//     35), once every batch that was in flight when the task's pages were last written or
//     allocated has been collected (its fence): a save exports the retained pages of every
//     stage into the job's buffers; a restore imports the file's pages into fresh pages.
//   - A finished save answers the tokens and pages (the caller encodes and writes the file,
//     off the engine thread); a finished restore maps the pages into the slot's retained
//     sequence, offering each full page to the prefix cache (the cached page is used when
//     the block is cached already), then answers.
//
// Thread safety: SlotJob's promise is fulfilled on the engine thread and read by the
// caller; everything else belongs to the engine thread.
// Lifetime: a SlotTask's pages are released when it ends (or the engine fails or stops).
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "base/status.h"
#include "cache/slot_file.h"
#include "kv/page_pool.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

// Page copies per engine step over all slot tasks. A memcpy of one page of a 0.6B-shaped
// model in F32 (~15 MB) takes a few milliseconds, so 4 keep a step near one decode step of
// such a model and running streams keep their pace; an idle engine runs steps back to back.
inline constexpr int kSlotPagesPerStep = 4;

// A validated slot file (restore): the views of `image` point into `bytes`.
struct SlotRestoreSource {
  std::vector<uint8_t> bytes;
  SlotImage image;
};

// What the engine thread answers.
struct SlotJobResult {
  int n_tokens = 0;             // saved, restored or erased
  std::vector<TokenId> tokens;  // save: the retained tokens
  // Save: [stage] its pages back to back, stage_bytes[stage] bytes. Not zero-filled (a
  // sequence's KV can be a gigabyte; the export writes every byte).
  std::vector<std::unique_ptr<uint8_t[]>> stage_pages;
  std::vector<size_t> stage_bytes;
};

struct SlotJob {
  enum class Op { kSave, kRestore, kErase } op = Op::kSave;
  int slot = 0;
  std::shared_ptr<const SlotRestoreSource> source;  // kRestore
  std::promise<Result<SlotJobResult>> done;
};

// A save or restore in progress (engine thread).
struct SlotTask {
  std::shared_ptr<SlotJob> job;
  std::vector<PageId> pages;  // one reference each, held by the task
  uint64_t fence = 0;         // usable once batches [0, fence) are collected
  int next_page = 0;          // pages [0, next_page) are copied
  SlotJobResult result;
};

}  // namespace shardlm
