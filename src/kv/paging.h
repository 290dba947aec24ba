// Paging instructions: how the engine's pager (kv/pager.h) tells every stage which pages
// to move between its resident frames and its tier (kv/page_residency.h), with a batch.
//
// With a bounded KV pool (`--kv-pool`), page ids are logical: a sequence's block table
// names them and the prefix cache, copy-on-write and the disk tier work on them as
// without a pool. Each stage stores at most n_frames of them in its PagePool (its
// frames); the others live in the stage's tier (RAM or a file). The pager decides, once for
// the whole pipeline, which pages sit in which frame, so every stage, local or remote,
// holds the same pages resident and a sequence reads the same KV whatever the split.
//
// PageSelection is the pager's memory of a sequence's pages, which the prefix cache, its
// disk tier and slot files keep beside the pages.
//
// Goals: plain values that the pipeline copies and the shard protocol puts on the wire.
// Non-goals: deciding (the pager), storing (PageResidency).
//
// Thread safety: values only. Lifetime: values only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm {

// A page placed in a frame of every stage's pool: its bytes come from the tier when the
// tier holds the page, else the frame is left as it is (a new page, written next).
struct PageFrame {
  PageId page = kNoPage;
  int32_t frame = -1;
  friend bool operator==(const PageFrame&, const PageFrame&) = default;
};

// What a stage applies before a batch, in this order (then the copy-on-write copies):
//  - reset (see there);
//  - frees: pages given back to the allocator: their frame (if any) and tier copy are
//    dropped without being written anywhere;
//  - evicts: resident pages moved out: their bytes go to the tier, their frame is free;
//  - maps: pages placed in frames (page-in from the tier).
struct PagingOps {
  // First: pages to forget (frame and tier), e.g. every page after a failed batch may have
  // left the stages apart.
  std::vector<PageId> frees;
  std::vector<PageId> evicts;
  std::vector<PageFrame> maps;

  bool empty() const { return frees.empty() && evicts.empty() && maps.empty(); }
  void clear() {
    frees.clear();
    evicts.clear();
    maps.clear();
  }
};

// The logical pages (indices into its page list, ascending) a sequence's attention reads in
// a batch. An empty list means every page: the unbounded case, and a pooled sequence whose
// context still fits its pool.
using AttendedPages = std::span<const int32_t>;

// Pages a stage could not move through its tier in a batch (a read or write failed: a
// truncated or full tier file): their bytes are lost. The stage stays consistent (its
// frames as the ops said) and the batch runs; the engine ends the sequences that hold them
// with `error` and drops the pages, so one bad page fails only the requests that need it.
struct PagingLoss {
  std::vector<PageId> pages;
  Status error;  // the first failure (it names the tier file and the page)
  void Add(PageId page, const Status& why) {
    pages.push_back(page);
    if (error.ok()) error = why;
  }
  void Merge(const PagingLoss& other) {
    for (PageId page : other.pages) Add(page, other.error);
  }
  bool empty() const { return pages.empty(); }
  void clear() {
    pages.clear();
    error = Status::Ok();
  }
};

// What the pager knew of a sequence's pages at one moment (Pager::Record). A later sequence
// that continues the same tokens (a prefix-cache hit, a restored slot, a restarted server)
// starts from it (Pager::BeginSequence), so its first choice of resident pages depends on
// the tokens it continues, never on the slot it lands in or on a restart between the two.
struct PageSelection {
  std::vector<float> scores;     // [logical page] latest qk score; -inf: unscored
  std::vector<int32_t> recency;  // [logical page] order of the last write or page-in, 0 oldest
  int n_pages() const { return int(scores.size()); }
  // Keeps the first n pages (ranks stay in order: only their relative order is used).
  void Truncate(int n) {
    if (n >= n_pages()) return;
    scores.resize(size_t(n));
    recency.resize(size_t(n));
  }
  friend bool operator==(const PageSelection&, const PageSelection&) = default;
};

}  // namespace shardlm
