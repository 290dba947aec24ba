// PrefixIndex: the in-memory prefix cache — block hash → the full page that holds that
// block's KV in every stage (block_hash.h).
//
// References (who retains what), for one page P cached under hash H:
//   - Publish(H, parent, P): the caller holds P (refcount ≥ 1) and keeps its own
//     reference; the index takes one more (Retain) and holds it until P is evicted,
//     erased or cleared.
//   - Lookup(hashes) returns a PrefixHit that holds one reference per hit page, taken for
//     the caller, so no eviction can free them before they are mapped. The caller maps
//     each into its block table (BlockTable::AppendSharedPage takes the table's own
//     reference), then drops the hit, which releases the hit's references. After that,
//     P's refcount = 1 (index) + 1 per block table that maps it.
//   - A cached page whose refcount is 1 is held by the index alone: an "unreferenced
//     cached page", which EvictUnreferenced may free.
// Cached pages are shared and never written: a sequence that needs to write into one
// copies it first (BlockTable::PrepareWrite's copy-on-write).
//
// Chains: entries form a tree (each block's parent is the block before it; block 0's
// parent is kRootBlockHash). A Lookup hit on block i needs blocks 0..i-1 to hit, so an
// entry whose parent is gone is unreachable. Therefore:
//   - Publish refuses a block whose parent is not cached (kParentMissing);
//   - EvictUnreferenced frees only leaves (entries with no cached child), least recently
//     used first, where "used" = published or hit; freeing a leaf can make its parent a
//     leaf, which is then a candidate in the same call. An unreferenced inner block stays
//     while a descendant is cached (its descendants are what make it valuable, and a
//     sequence that holds a descendant normally holds it too).
//   - Erase(H) removes H and every descendant (they would be unreachable).
//
// Goals: O(1) lookup per block, exact refcounts, eviction that never frees a page in use.
// Non-goals: choosing how many blocks to look up (the caller passes the hashes it may use,
// e.g. all but the block holding the last prompt token), the disk tier (disk_store.h).
//
// Thread safety: not thread-safe; owned by the scheduler's thread, like the allocator.
// Lifetime: the allocator must outlive the index and every PrefixHit; the destructor
// releases the index's references (Clear).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_hash.h"
#include "kv/page_allocator.h"

namespace shardlm {

// The pages of a Lookup hit, one reference each, released on destruction (or Release()).
// Move-only.
class PrefixHit {
 public:
  PrefixHit() = default;
  PrefixHit(PageAllocator* pages, std::vector<PageId> hit_pages)
      : pages_(pages), hit_pages_(std::move(hit_pages)) {}
  ~PrefixHit() { Release(); }
  PrefixHit(PrefixHit&& other) noexcept;
  PrefixHit& operator=(PrefixHit&& other) noexcept;
  PrefixHit(const PrefixHit&) = delete;
  PrefixHit& operator=(const PrefixHit&) = delete;

  // Leading blocks that hit: block i of the lookup is in page pages()[i].
  int n_blocks() const { return static_cast<int>(hit_pages_.size()); }
  const std::vector<PageId>& pages() const { return hit_pages_; }
  // Releases the hit's references now; pages() becomes empty.
  void Release();

 private:
  PageAllocator* pages_ = nullptr;
  std::vector<PageId> hit_pages_;
};

enum class PublishOutcome {
  kPublished = 0,  // the index took a reference on the page
  kAlreadyCached,  // the hash was cached (maybe under another page): nothing taken
  kParentMissing,  // the parent block is not cached: nothing taken (unreachable)
  kSentinel
};

struct PrefixIndexStats {
  int64_t lookups = 0;
  int64_t lookup_blocks = 0;  // blocks asked for, over all lookups
  int64_t hit_blocks = 0;     // blocks served from the cache, over all lookups
  int64_t published = 0;
  int64_t evicted = 0;  // pages freed by EvictUnreferenced
  int64_t erased = 0;   // entries removed by Erase (Clear is not counted)
};

class PrefixIndex {
 public:
  explicit PrefixIndex(PageAllocator* pages) : pages_(pages) {}
  ~PrefixIndex() { Clear(); }
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // Caches `page` (a full page the caller holds) under `hash`, whose parent block is
  // `parent` (kRootBlockHash for block 0). See the header comment for the outcomes.
  PublishOutcome Publish(const BlockHash& hash, const BlockHash& parent, PageId page);

  // The longest cached chain of leading `hashes` (hashes[0] must be a block 0 hash, as
  // ChainBlockHashes gives). Marks the hit blocks used.
  PrefixHit Lookup(std::span<const BlockHash> hashes);

  // Frees up to n_pages_wanted unreferenced cached leaves, least recently used first;
  // returns how many pages went back to the allocator.
  int EvictUnreferenced(int n_pages_wanted);

  // Removes `hash` and its descendants, releasing the index's references; returns how
  // many entries were removed (0 when not cached).
  int Erase(const BlockHash& hash);
  // Removes every entry whose page `drop` picks (and their descendants); returns how many
  // entries were removed. O(size).
  int ErasePages(const std::function<bool(PageId)>& drop);
  // Releases every reference the index holds.
  void Clear();

  bool Contains(const BlockHash& hash) const { return entries_.contains(hash); }
  // kNoPage when not cached.
  PageId PageOf(const BlockHash& hash) const;
  int size() const { return static_cast<int>(entries_.size()); }
  // Cached pages held by the index alone (what EvictUnreferenced could free at most,
  // counting inner blocks that become leaves). O(size).
  int CountUnreferenced() const;
  const PrefixIndexStats& stats() const { return stats_; }

 private:
  struct Entry {
    PageId page = kNoPage;
    BlockHash parent;
    int n_children = 0;
    uint64_t last_use = 0;  // tick of the last publish or hit
  };
  using LeafKey = std::pair<uint64_t, BlockHash>;  // (last_use, hash): LRU order
  struct LeafKeyLess {
    bool operator()(const LeafKey& a, const LeafKey& b) const;
  };

  void Touch(const BlockHash& hash, Entry& entry);
  // Drops one entry that has no children: releases its page, unlinks it from its parent.
  void RemoveLeaf(const BlockHash& hash);

  PageAllocator* pages_;
  std::unordered_map<BlockHash, Entry> entries_;
  std::set<LeafKey, LeafKeyLess> leaves_;  // entries with n_children == 0
  uint64_t tick_ = 0;
  PrefixIndexStats stats_;
};

}  // namespace shardlm
