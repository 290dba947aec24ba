// SchedulerPrefixCache: the Scheduler's in-memory prefix cache (DESIGN.md "block hash") —
// which KV pages of a slot are shared with earlier requests and which it offers to later ones.
//
// Goals:
//  - Admission: map the longest cached chain of the prompt's full blocks into the slot's
//    empty block table; the request skips those tokens, but never its last prompt token
//    (its logits are needed; a wholly cached prompt recomputes it, copy-on-write).
//  - Publishing: once a batch is collected (every stage wrote its KV), each page the slot
//    filled with known prompt or generated tokens is published under its chain hash. A
//    slot publishes a block only while its previous block is the cached page itself, so
//    every cached page no sequence holds stays evictable.
//  - Eviction: when a write finds the pool full, Evict frees unreferenced cached pages
//    (LRU leaves) so the write can be retried.
//  - Counters: skipped prompt tokens, lookups, hits, evictions, cached pages.
//  - Disabled (options.prefix_cache off) it is a null object: nothing is mapped, published
//    or evicted, and only the zero counters are reported.
// Non-goals: the disk tier; choosing which slot writes what (the scheduler does).
//
// Thread safety: none; the engine thread alone uses it.
// Lifetime: the allocator must outlive it (cached pages go back to it on destruction); the
// block tables and requests passed in are only used during the call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/block_hash.h"
#include "cache/prefix_index.h"
#include "gguf/fingerprint.h"
#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "runtime/engine.h"

namespace shardlm {

class ActiveRequest;

class SchedulerPrefixCache {
 public:
  // enabled false: the null object. n_slots: the slot indices passed in are [0, n_slots).
  SchedulerPrefixCache(bool enabled, PageAllocator* allocator, int n_slots, int page_tokens,
                       const Fingerprint128& fingerprint);
  SchedulerPrefixCache(const SchedulerPrefixCache&) = delete;
  SchedulerPrefixCache& operator=(const SchedulerPrefixCache&) = delete;

  bool enabled() const { return index_ != nullptr; }

  // A request was admitted into `slot`, whose table is empty: maps its cached prefix into
  // the table and tells the request how many prompt tokens it may skip.
  void Admit(int slot, ActiveRequest& request, BlockTable& table);
  // Positions [0, written_end) of the slot's sequence hold KV in every stage: publishes the
  // full pages among them, in chain order.
  void PublishFullPages(int slot, const ActiveRequest& request, const BlockTable& table,
                        int written_end);
  // Evicts up to n_pages unreferenced cached pages; returns how many (0 when disabled).
  int Evict(int n_pages);
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
  };

  std::unique_ptr<PrefixIndex> index_;  // null when disabled
  Fingerprint128 fingerprint_;          // the model's: part of every block hash
  int page_tokens_;
  std::vector<Chain> chains_;  // [slot]
  int64_t prompt_tokens_cached_ = 0;
};

}  // namespace shardlm
