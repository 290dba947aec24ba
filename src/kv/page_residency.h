// PageResidency: a stage's side of a bounded KV pool: which logical page each frame of its
// PagePool holds, the tier that holds the others, and the key summaries of them all.
//
// The engine's pager (kv/pager.h) decides; every stage applies its PagingOps in batch order
// (frees, evicts, maps; then the batch's copy-on-write copies), so all stages hold the same
// pages in the same frames. A page the tier holds is read back when it is mapped; a page
// evicted goes to the tier only if it was written since it was last read from there (KV is
// append-only: a full page read back is never written again, so most evictions cost no I/O).
//
// For the forward pass a batch's page lists (logical ids) become frame lists: the frame of
// each attended page, kNoPage for the pages the sequence does not read this batch.
//
// Export and import (disk cache, slot files, shard export) work on logical pages wherever
// they are: a resident page from its frame, the others from or into the tier; an imported
// page is summarized for the `qk` selection.
//
// Goals: bit-exact moves; a tier failure (full disk, truncated file) loses only the page it
// moved: Apply and Copy carry on (the frames end as the ops said), report the page in a
// PagingLoss, and the page is refused to Export (its bytes never reach a cache file) until
// it is freed or imported whole again.
// Non-goals: deciding what moves (the pager), the page bytes layout (PagePool).
//
// Thread safety: Apply, Copy, Frames and the summary updates run on the stage's batch
// thread; Export and Import may run on other threads at the same time: a mutex guards the
// map and the tier.
// Lifetime: borrows the pool; owns the tier and the summaries.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/key_summaries.h"
#include "kv/kv_tier.h"
#include "kv/page_pool.h"
#include "kv/paging.h"

namespace shardlm {

// A stage's paging counters (/metrics and /props): pages in frames and in the tier now, and
// the moves so far.
struct ResidencyStats {
  int resident_pages = 0;
  int64_t tier_pages = 0;
  uint64_t page_ins = 0;   // reads from the tier
  uint64_t page_outs = 0;  // writes to the tier
  uint64_t bytes_paged = 0;
  double paging_seconds = 0.0;
};

class PageResidency {
 public:
  // Logical pages [0, n_pages) over the frames of `frames`, the others in `tier` (which
  // must have n_pages pages of frames->page_bytes()). summaries: of the n_pages pages, with
  // the `qk` selection (null without).
  static Result<std::unique_ptr<PageResidency>> Create(PagePool* frames, int n_pages,
                                                       std::unique_ptr<KvTier> tier,
                                                       std::unique_ptr<KeySummaries> summaries);
  PageResidency(const PageResidency&) = delete;
  PageResidency& operator=(const PageResidency&) = delete;

  int n_pages() const { return int(frame_of_.size()); }
  // The frame holding `page`, or kNoPage.
  PageId frame_of(PageId page) const { return frame_of_[page]; }
  KeySummaries* summaries() { return summaries_.get(); }
  const KvTier& tier() const { return *tier_; }

  // Errors: an id outside the pages or frames, a map into a held frame (InvalidArgument,
  // nothing applied). A tier failure is no error: the page goes into *loss.
  Status Apply(const PagingOps& ops, PagingLoss* loss);
  // Copy-on-write: dst (resident) gets src's bytes, from src's frame or the tier (a failed
  // read, or a lost src, puts dst into *loss).
  Status Copy(PageId src, PageId dst, PagingLoss* loss);
  // frames[i] = the frame of pages[i] when i is attended (every i when `attended` is empty),
  // else kNoPage. Errors: an attended page that is not resident (InvalidArgument).
  Status Frames(std::span<const PageId> pages, AttendedPages attended,
                std::vector<PageId>* frames) const;
  // The written page is dirty: its next eviction writes it to the tier.
  void MarkWritten(PageId page) { dirty_[page] = 1; }

  Status Export(std::span<const PageId> pages, uint8_t* dst);
  // Each page forgets what it held (frame, tier copy, summary), then its bytes go to the tier.
  Status Import(std::span<const PageId> pages, const uint8_t* src);

  ResidencyStats Stats() const;

 private:
  PageResidency(PagePool* frames, int n_pages, std::unique_ptr<KvTier> tier);
  // out: the tier's copy of `page` from `frame`; else `page` from the tier into `frame`.
  // Counted and timed.
  Status Move(bool out, PageId page, PageId frame);
  void Evict(PageId page, PagingLoss* loss);
  Status Map(PageId page, PageId frame, PagingLoss* loss);
  void Lose(PageId page, const Status& why, PagingLoss* loss);
  void Free(PageId page);
  Status CheckPage(PageId page) const;

  PagePool* frames_;
  std::unique_ptr<KvTier> tier_;
  std::unique_ptr<KeySummaries> summaries_;
  std::vector<PageId> frame_of_;  // [page] → frame or kNoPage
  std::vector<PageId> page_in_;   // [frame] → page or kNoPage
  std::vector<uint8_t> dirty_;    // [page] → written since the tier last had it
  std::vector<uint8_t> lost_;     // [page] → its bytes were lost (PagingLoss) since
  mutable std::mutex mu_;         // frame_of_, page_in_, tier_, stats_
  ResidencyStats stats_;
};

}  // namespace shardlm
