// Scheduler slots (`/slots` save, restore, erase): the jobs a caller thread hands the engine
// thread, and the slot transfers they drive.
//
// A save or restore is a transfer between a caller thread, which does every file byte
// (scheduler_slot_files.cc), and the engine thread, which owns the slot and every KV page
// (scheduler_slots.cc). The caller drives it with jobs, each queued as an instruction and
// answered through its promise:
//   save:    kSaveBegin, kCopy per chunk (pages exported into the caller's buffers; the first
//            also exports the recurrent state at the sequence's last whole page), kEnd
//   restore: kRestoreBegin, kRestoreAllocate, kCopy per chunk (pages imported), kEnd
//   erase:   kErase
//  - A begin holds the slot (SlotState kSaving / kRestoring: admission skips it, and every
//    other job on it answers kConflict), or answers kConflict when the slot runs a request
//    or another transfer — before the caller has opened the file. A save's begin takes a
//    reference on every retained page and answers the tokens.
//  - kRestoreAllocate takes fresh pages for the file's sequence (evicting unreferenced cached
//    pages when the pool is full). The slot's retained sequence stays as it is until the
//    commit, so a restore that fails anywhere (a bad file, a checksum at the end, too few
//    free pages, a stage down) leaves the slot exactly as it was.
//  - kCopy moves pages [first_page, first_page + n_pages) of the transfer, at most
//    kSlotChunkPages, between the caller's buffers and every stage. The engine thread
//    offers all copies kSlotPagesPerStep pages per step (a resumable task), once every
//    batch that was in flight when the pages were last written or allocated has been
//    collected (the transfer's fence).
//  - kEnd releases the transfer's pages, or, for a restore with `commit`, makes them the
//    slot's retained sequence (dropping the one before), offering each full page to the
//    prefix cache (the cached page is used when the block is cached already). A model with
//    recurrent layers also gets the file's state at the last whole page: kept for that block
//    (scheduler_recurrent_states.h) and imported into the slot.
//  - A failed batch or a lost stage releases every transfer's pages at once and fails the
//    transfer: its later jobs answer that error, and the slot stays held until the
//    caller's kEnd, which the caller always sends.
//
// Thread safety: SlotJob's promise is fulfilled on the engine thread and read by the
// caller, which owns the job's buffers until then; everything else belongs to the engine
// thread. Lifetime: a transfer's pages are released at its kEnd, or when the engine fails
// or stops.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"
#include "kv/paging.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

// Page copies per engine step over all slot transfers. A memcpy of one page of a
// 0.6B-shaped model in F32 (~15 MB) takes a few milliseconds, so 4 keep a step near one
// decode step of such a model and running streams keep their pace; an idle engine runs
// steps back to back.
inline constexpr int kSlotPagesPerStep = 4;
// Pages one kCopy moves at most: one step's worth. The caller's buffers hold this many
// pages of every stage, which is all the memory a transfer costs beyond its pool pages,
// however long the sequence.
inline constexpr int kSlotChunkPages = kSlotPagesPerStep;

// What the engine thread answers.
struct SlotJobResult {
  int n_tokens = 0;             // erase: erased; save begin: held; restore kEnd: restored
  std::vector<TokenId> tokens;  // save begin: the retained tokens
  std::optional<PageSelection> selection;  // save begin: the bounded pool's, if any
};

struct SlotJob {
  enum class Op { kErase, kSaveBegin, kRestoreBegin, kRestoreAllocate, kCopy, kEnd };
  Op op = Op::kErase;
  int slot = 0;
  int n_pages = 0;                      // kRestoreAllocate: all; kCopy: this chunk's
  int first_page = 0;                   // kCopy
  std::vector<uint8_t*> stage_buffers;  // kCopy: [stage] n_pages pages, back to back
  // kCopy of a save's first chunk, for a sequence with a whole page of a model with recurrent
  // layers: the state at its last whole page goes here (Pipeline::state_bytes()).
  std::span<uint8_t> state_buffer;
  bool commit = false;                     // kEnd of a restore: keep the imported sequence
  std::vector<TokenId> tokens;             // kEnd with commit: the restored tokens
  std::optional<PageSelection> selection;  // kEnd with commit: the file's, if any
  std::vector<uint8_t> state;              // kEnd with commit: the file's, if any
  std::promise<Result<SlotJobResult>> done;
};

// A save or restore in progress on a slot (engine thread), from its begin to its kEnd.
struct SlotTransfer {
  std::vector<PageId> pages;  // one reference each, held by the transfer
  uint64_t fence = 0;         // usable once batches [0, fence) are collected
  Status failed;              // the engine failed meanwhile: the pages are gone
};

// What a restore's caller read from the file, once every byte checked out.
struct RestoredSlotFile {
  std::vector<TokenId> tokens;
  std::optional<PageSelection> selection;
  uint64_t n_bytes = 0;
  std::vector<uint8_t> state;  // at the last whole page; empty: none
};

// A kCopy in progress (engine thread).
struct SlotCopyTask {
  std::shared_ptr<SlotJob> job;
  int n_copied = 0;  // pages [first_page, first_page + n_copied) are done
};

}  // namespace shardlm
