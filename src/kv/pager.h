// Pager: the engine's side of a bounded KV pool (`--kv-pool`): which pages of each
// sequence are resident and read by attention, in which frame, and what moves before each
// batch.
//
// Every slot (sequence) may keep at most pool_pages pages resident; the pipeline's frames are
// n_slots × pool_pages, so a slot never waits for another. Pages shared by several slots
// (prefix-cache hits, forks) sit in one frame. A slot's resident set always holds:
//  - the sink: its first sink_pages pages (attention leans on the first positions);
//  - the tail: the pages of the last tail_tokens positions before the write;
//  - the pages the batch writes;
// and then, while the context fits (pages ≤ pool_pages) every page: attention is exact.
// Past that, the rest of the pool is chosen by the selection policy:
//  - `qk`: every reselect_tokens decode tokens the decode entry asks every stage for page
//    scores (kv/key_summaries.h: for each layer and query head, the page's q·k upper bound
//    minus the best page's, maximized over layers and heads; stages combine by maximum, so
//    the score is the same on every split); the next batch keeps the best-scoring pages.
//    The last prompt position asks too, so decoding starts from a selection.
//  - `lru`: the pages written or paged in most recently (a sliding window behind the sink).
// Between reselections a page that must come in (a new tail page) evicts the resident page
// with the lowest score (unscored pages rank by recency), so prefill through the pool keeps
// a sink and a window.
//
// Sequences: a slot's new sequence forgets the last one's scores and recency
// (BeginSequence). A sequence that continues cached tokens (a prefix-cache hit, a restored
// slot, a restarted server) starts from the PageSelection recorded for them (Record, kept
// by the prefix cache, its disk tier and slot files), so its first choice is the same
// whichever slot it lands in and whether or not the server restarted in between.
// Determinism: every decision is made here, on the engine thread, from the batches and the
// scores, never from timing, thread counts or the split; every stage applies the same ops.
//
// Goals: bounded resident KV per sequence whatever the context; O(pages) work per batch.
// Pins: a request may name position ranges to keep resident (EngineRequest::pins); they are
// required like the sink and the tail.
// Non-goals: moving bytes (PageResidency, in each stage), page ids and refcounts
// (PageAllocator).
//
// Thread safety: not thread-safe; the scheduler's thread owns it.
// Lifetime: the allocator's free hook calls OnPageFreed; the pager outlives its block tables.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"
#include "kv/paging.h"

namespace shardlm {

enum class PageSelect { kQk = 0, kLru = 1 };
const char* PageSelectName(PageSelect select);
Result<PageSelect> ParsePageSelect(const std::string& name);  // "qk" | "lru"

// What the flags ask for, in positions (`--kv-pool`, `--kv-sink`, `--kv-tail`, `--kv-reselect`).
struct KvPoolOptions {
  int pool_tokens = 0;  // 0: unbounded (no pager)
  int sink_tokens = 64;
  int tail_tokens = 256;
  int reselect_tokens = 64;
  PageSelect select = PageSelect::kQk;
  bool bounded() const { return pool_tokens > 0; }
  friend bool operator==(const KvPoolOptions&, const KvPoolOptions&) = default;
};

struct PagerConfig {
  int n_pages = 0;  // logical pages (the allocator's)
  int page_tokens = 0;
  int n_slots = 0;
  KvPoolOptions pool;
  int pool_pages() const { return (pool.pool_tokens + page_tokens - 1) / page_tokens; }
  int sink_pages() const { return (pool.sink_tokens + page_tokens - 1) / page_tokens; }
  int n_frames() const { return n_slots * pool_pages(); }
  // The smallest pool that always fits the sink, the tail (which may straddle a page) and
  // a write.
  int min_pool_pages() const {
    return sink_pages() + (pool.tail_tokens + page_tokens - 1) / page_tokens + 2;
  }
  // InvalidArgument naming the sizes when the pool is below min_pool_pages().
  Status Validate() const;
};

struct PagerStats {
  uint64_t reselects = 0;
  uint64_t pages_mapped = 0;   // maps asked of the stages
  uint64_t pages_evicted = 0;  // evictions asked of the stages
  int frames_used = 0;
  int pinned_pages = 0;       // pinned by the slots' requests now
  double select_seconds = 0;  // in Prepare: choosing pages and the moves
};

class Pager {
 public:
  static Result<std::unique_ptr<Pager>> Create(const PagerConfig& config);
  Pager(const Pager&) = delete;
  Pager& operator=(const Pager&) = delete;

  const PagerConfig& config() const { return config_; }
  int pool_pages() const { return pool_pages_; }

  // The positions [begin, end) of `ranges` stay resident in the slot from now on (a new
  // request's pins replace the last one's).
  void SetPins(int slot, std::span<const std::pair<int32_t, int32_t>> ranges);
  // Pages `ranges` pin: what a request's pins cost its pool.
  int PinnedPages(std::span<const std::pair<int32_t, int32_t>> ranges) const;
  // `ranges` and as much of [0, prefix_end) as the pool has room for beside the sink, the
  // tail, a write and `ranges` (whole pages; nothing when there is no room).
  std::vector<std::pair<int32_t, int32_t>> WithPrefixPin(
      std::vector<std::pair<int32_t, int32_t>> ranges, int32_t prefix_end) const;
  // A new sequence of n_pages pages (its prefix so far) in the slot: forgets the last one's
  // scores and recency. `from` (may be null): the selection recorded for the tokens it
  // continues (its first pages). The next Prepare past the pool chooses among all the
  // sequence's pages by the adopted scores, then recency (pages past the record count as
  // the newest), then position.
  void BeginSequence(int slot, const PageSelection* from, int n_pages);
  // The slot's selection of its first n_pages pages, for BeginSequence.
  PageSelection Record(int slot, int n_pages) const;
  // Most positions slot may write from `begin` in one batch so that the sink, the tail and
  // the written pages fit its pool (unbounded while the context fits: returns `wanted`).
  int MaxWrite(int slot, int begin, int wanted) const;
  // Before a batch that writes positions [begin, end) of the slot's pages (a block table
  // with those pages allocated): chooses the slot's resident pages and appends the moves to
  // the pending ops. Errors: the write does not fit the pool (OutOfRange, sizes named).
  Status Prepare(int slot, std::span<const PageId> pages, int begin, int end);
  // Pages of the slot's sequence mapped back from the tier since BeginSequence (pages that
  // held KV already: a page first written by the batch is no page-in).
  uint64_t page_ins(int slot) const { return slots_[slot].page_ins; }
  // Whether `page` sits in a frame (else the stages' tiers hold it, if anyone does).
  bool resident(PageId page) const { return frame_of_[page] != kNoPage; }
  // The frame `page` sits in (every stage's), or kNoPage.
  PageId frame(PageId page) const { return frame_of_[page]; }
  // The slot's attended logical pages (ascending), as of its last Prepare.
  AttendedPages attended(int slot) const { return slots_[slot].attended; }
  // Whether the slot's next entry, at a context of n_pages pages, should ask for page scores:
  // qk selection, a context past the pool, and reselect_tokens decode entries since the
  // last scores or the prompt's last position (prompt_end).
  bool WantsScores(int slot, int n_pages, bool prompt_end);
  // The scores a scoring entry brought back ([logical page], -inf: unscored).
  void SetScores(int slot, std::span<const float> scores);
  // The allocator gave `page` back: it leaves every resident set without a write.
  void OnPageFreed(PageId page);
  // Forgets every resident set and frame and asks the stages to forget every page (after a
  // failed batch; the caller has released every page).
  void Reset();
  // The moves for the next batch.
  const PagingOps& pending() const { return pending_; }
  // The pending moves went to the stages with batch number `batch`: forgets them, and
  // remembers which batch carried each page's free.
  void ClearPending(uint64_t batch);
  // Imports: the stages write an imported page's bytes outside any batch (a disk-cache load,
  // a slot restore) and forget what the page held before. A free of the page arriving after
  // the import would undo it. False while the batch that carried the page's last free is not
  // collected (`collected` batches are): the import waits. True when the page may be
  // imported now: a free of it that no batch carried yet is dropped (the import does it),
  // so the caller imports the page before the next batch goes.
  bool ReadyToImport(PageId page, uint64_t collected);
  PagerStats Stats() const;

 private:
  struct SlotPages {
    std::vector<int32_t> pinned;     // logical pages pinned by the slot's request
    std::vector<int32_t> attended;   // logical pages, ascending
    std::vector<PageId> ids;         // page id of each attended page
    std::vector<uint64_t> last_use;  // [logical page] stamp of the last write or page-in
    std::vector<float> scores;       // [logical page] latest scores
    bool fresh_scores = false;
    bool adopting = false;  // the next Prepare chooses among all pages (BeginSequence)
    uint64_t page_ins = 0;
    int decodes_since_scores = std::numeric_limits<int>::max() / 2;
  };
  explicit Pager(const PagerConfig& config);
  // True when the page had no frame and was mapped.
  bool Ref(PageId page);
  void Unref(PageId page);
  // Logical pages that must be resident for a write of [begin, end) on `n_pages` pages.
  void Required(int begin, int end, int n_pages, std::vector<uint8_t>* need) const;

  PagerConfig config_;
  int pool_pages_;
  std::vector<SlotPages> slots_;
  std::vector<PageId> frame_of_;  // [page] → frame or kNoPage
  std::vector<int32_t> refs_;     // [page] → resident sets holding it
  std::vector<PageId> free_frames_;
  PagingOps pending_;
  std::vector<uint64_t> free_sent_;  // [page] → the batch that carried its last free
  uint64_t clock_ = 0;
  PagerStats stats_;
  std::vector<uint8_t> need_;        // scratch: [logical page] → 1 required, 2 chosen
  std::vector<int32_t> candidates_;  // scratch: pages Prepare may keep beside the required
};

}  // namespace shardlm
