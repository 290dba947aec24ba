// SchedulerPrefixCache: the Scheduler's in-memory prefix cache (pages keyed by block hash:
// cache/block_hash.h) — which KV pages of a slot are shared with earlier requests and which it
// offers to later ones.
//
// Goals:
//  - Admission: map the longest cached chain of the prompt's full blocks into the slot's
//    empty block table; the request skips those tokens, but never its last prompt token
//    (its logits are needed; a wholly cached prompt recomputes it, copy-on-write). A
//    request that needs outputs of every prompt position (an embedding, the prompt's
//    logprobs) maps nothing and computes the whole prompt, but publishes like any other.
//  - Publishing: once a batch is collected (every stage wrote its KV), each page the slot
//    filled with known prompt or generated tokens is published under its chain hash. A
//    slot publishes a block only while its previous block is the cached page itself, so
//    every cached page no sequence holds stays evictable.
//  - Eviction: when a write finds the pool full, Evict frees unreferenced cached pages
//    (LRU leaves) so the write can be retried.
//  - Disk tier (optional, scheduler_disk_cache.h): a published page is handed to the disk
//    cache to persist; at admission, when the block after the memory hit is on disk, the
//    slot starts a load task (LoadStep, resumable, a bounded number of pages per engine
//    step) that continues the chain from disk: per block a fresh page is allocated, filled
//    in every stage (all or nothing), mapped into the table and published into the memory
//    index. The first block that is missing or fails to load ends the task; the rest is
//    prefilled. Blocks published faster than the disk takes them wait in a backlog, in chain
//    order, and are offered again as the export queue drains (CatchUpPersist, also while
//    the engine idles; the destructor writes what remains), so a long prompt reaches disk
//    whole. A page allocated for a load is filled only once every batch that was in
//    flight at its allocation has been collected (a page freed by a finished sequence may
//    still be written by its last batch).
//  - Page selections (a bounded KV pool, kv/pager.h): when a sequence's prompt has been
//    scored and when it ends, the pager's memory of its pages (PageSelection) is kept for
//    its last published block (and persisted beside the blocks on disk). A request whose
//    cached prefix is longer than the pool starts from the selection of the deepest block
//    of its prefix that has one, so its first resident pages depend on the tokens it
//    continues, not on its slot or a restart. The first selection kept for a block stays;
//    it goes when its block leaves the memory cache (the disk keeps its own).
//  - Recurrent state (a model with recurrent layers, scheduler_recurrent_states.h): cached
//    pages resume a sequence only with its recurrent state at their end, so a hit is cut to
//    the deepest block whose state was kept when an earlier sequence ended there (or a slot
//    file restored there).
//  - Counters: skipped prompt tokens (from memory, from disk), lookups, hits, evictions,
//    cached pages.
//  - Disabled (options.prefix_cache off) it is a null object: nothing is mapped, published
//    or evicted, and only the zero counters are reported.
// Non-goals: disk I/O (scheduler_disk_cache.h); choosing which slot writes what (the
// scheduler does).
//
// Thread safety: none; the engine thread alone uses it.
// Lifetime: the allocator and the disk cache must outlive it (cached pages go back to the
// allocator on destruction); the block tables and requests passed in are only used during
// the call.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_hash.h"
#include "cache/prefix_index.h"
#include "engine/engine.h"
#include "engine/scheduler_disk_cache.h"
#include "engine/scheduler_recurrent_states.h"
#include "gguf/fingerprint.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "kv/pager.h"

namespace shardlm {

class ActiveRequest;
enum class TaskState;

class SchedulerPrefixCache {
 public:
  // enabled false: the null object. n_slots: the slot indices passed in are [0, n_slots).
  // disk: the disk tier, or null (ignored when disabled). pager: the bounded KV pool's, or
  // null.
  // recurrent: the recurrent state kept per block (a model with recurrent layers), or null.
  SchedulerPrefixCache(bool enabled, PageAllocator* allocator, int n_slots, int page_tokens,
                       const Fingerprint128& fingerprint, SchedulerDiskCache* disk = nullptr,
                       Pager* pager = nullptr, RecurrentCheckpoints* recurrent = nullptr);
  ~SchedulerPrefixCache();
  SchedulerPrefixCache(const SchedulerPrefixCache&) = delete;
  SchedulerPrefixCache& operator=(const SchedulerPrefixCache&) = delete;

  bool enabled() const { return index_ != nullptr; }

  // A request was admitted into `slot`, whose table is empty: maps its cached prefix into
  // the table and tells the request how many prompt tokens it may skip, or, when the chain
  // continues on disk, starts the slot's load task (loading() until it finishes).
  void Admit(int slot, ActiveRequest& request, BlockTable& table);
  bool loading(int slot) const { return chains_[slot].loading; }
  // Offers the slot's load task up to `page_budget` page loads (decremented). Batches
  // [0, collected) of the `submitted` so far have been collected. kFinished once the
  // request knows its cached prefix (it may prefill then); kBlocked when the budget ran
  // out; kNotFinished when it waits for batches in flight.
  TaskState LoadStep(int slot, ActiveRequest& request, BlockTable& table, int& page_budget,
                     uint64_t submitted, uint64_t collected);
  // The slot's request ended (a load in progress frees its page).
  void EndSlot(int slot);
  // Positions [0, written_end) of the slot's sequence hold KV in every stage: publishes the
  // full pages among them, in chain order.
  void PublishFullPages(int slot, const ActiveRequest& request, const BlockTable& table,
                        int written_end);
  // Keeps, for the slot's last published block, what a sequence resuming there needs besides
  // the pages: the pager's selection of them (a bounded pool) and the recurrent state (a model
  // with recurrent layers); no-op for whichever the engine does not have. When a prompt is
  // prefilled and when a sequence ends. `state_source`: the pipeline that computed the state
  // (a prefill worker), else the engine's.
  void RememberSequence(int slot, Pipeline* state_source = nullptr);
  // A restored sequence (`tokens`, held in `pages`, one per block, the caller holding a
  // reference on each) joins the cache: each full block that is cached already has its page
  // swapped for the cached one (reference moved: the restored copy is released); the others
  // are published in chain order (and persisted with the disk tier). No-op when disabled.
  // `selection` (may be null): the restored sequence's, kept for its last full block.
  // `state` (may be empty): the restored sequence's recurrent state after its last full
  // block, kept for that block (and persisted with the disk tier) as a finished sequence's is.
  void AdoptRestored(std::span<const TokenId> tokens, std::vector<PageId>& pages,
                     const PageSelection* selection = nullptr, std::span<const uint8_t> state = {});
  // Offers the disk the blocks it had no room for, oldest first, while its queue has room
  // (a block no longer cached is skipped). True while some wait.
  bool CatchUpPersist();
  bool persist_backlog() const { return !unpersisted_.empty(); }
  // Evicts up to n_pages unreferenced cached pages; returns how many (0 when disabled).
  // When none is free but pages wait for export to disk, waits for those first.
  int Evict(int n_pages);
  // Forgets the cached blocks whose page `drop` picks and the blocks after them (their bytes
  // were lost, or may be, by a KV tier); the disk keeps its own copies.
  void ForgetPages(const std::function<bool(PageId)>& drop);
  // Forgets every cached page (a lost stage: its pages are gone).
  void Clear();

  // Pages only the cache holds (free for a running sequence once evicted).
  int n_cached_only() const;
  // Writes the prefix-cache counters into stats.
  void FillStats(EngineStats& stats) const;

 private:
  // Per slot: hashes[i] is the chain hash of full block i (the prompt's at admission,
  // extended as generated tokens fill pages); blocks [0, n_published) are cached or were
  // offered to the cache; publishing stops for good once a block's page is not the cached
  // one.
  struct Chain {
    std::vector<BlockHash> hashes;
    int n_published = 0;
    bool publishing = false;
    // Load task: blocks [memory_blocks, table pages) came from disk; `pending` is the page
    // being filled, usable once batches [0, fence) are collected.
    bool loading = false;
    int memory_blocks = 0;
    PageId pending = kNoPage;
    uint64_t fence = 0;
  };

  // Ends admission: the request skips the table's tokens (but its last prompt token); with
  // recurrent layers, only the blocks up to the deepest one whose state is kept (the table
  // is cut there and the state imported into the slot).
  void FinishAdmit(int slot, ActiveRequest& request, BlockTable& table);
  void ReleasePending(Chain& chain);
  // Persists a block published under `hash` in `page`, behind the backlog.
  void PersistBlock(const BlockHash& hash, const BlockHash& parent, PageId page);
  // Keeps `selection` for block `hash` unless one is kept (in memory or on disk) already.
  void KeepSelection(const BlockHash& hash, PageSelection selection);
  // The selection of the deepest block of hashes [0, n_blocks) that has one, into the slot's
  // pager (a fresh start when none has).
  void AdoptSelection(int slot, std::span<const BlockHash> hashes, int n_blocks);

  std::unique_ptr<PrefixIndex> index_;  // null when disabled
  PageAllocator* allocator_;
  SchedulerDiskCache* disk_;                                 // null: no disk tier
  Pager* pager_;                                             // null: unbounded KV
  RecurrentCheckpoints* recurrent_;                          // null: no recurrent layers
  std::unordered_map<BlockHash, PageSelection> selections_;  // by a cached block's hash
  // (hash, parent) of published blocks the disk queue had no room for, in publishing order.
  std::deque<std::pair<BlockHash, BlockHash>> unpersisted_;
  static constexpr size_t kMaxUnpersisted = size_t{1} << 16;
  Fingerprint128 fingerprint_;  // the model's: part of every block hash
  int page_tokens_;
  std::vector<Chain> chains_;  // [slot]
  int64_t prompt_tokens_memory_ = 0;
  int64_t prompt_tokens_disk_ = 0;
};

}  // namespace shardlm
