// KeySummaries: per page, layer and kv head, the per-channel minimum and maximum of the
// stored keys, and the upper bound they give on a query's attention score (as Quest does).
//
// For a query q and a page whose keys k lie in the box [min, max] channel by channel,
// q·k ≤ Σ_c max(q_c·min_c, q_c·max_c): the page cannot hold a key scoring more than that.
// The `qk` page selection (kv/pager.h) ranks a sequence's pages by this bound, for the
// decode token's queries, and keeps the best ones resident. Summaries cover every page,
// resident or in the tier, so a page that left the pool can be called back.
//
// A summary is made of the stored rows (dequantized from the KV type), so it depends only
// on the KV a page holds, never on how or when it was written: rows are added as positions
// are written in order, and a write that does not continue the summarized rows (a sequence
// rewriting from an earlier position) rebuilds the summary from the stored rows first.
//
// Memory: 2 × head_dim floats per (page, layer, kv head), 1/(page_tokens) of the F32 keys
// (1/32 of F16 K+V at 64 positions a page); reserved for every page id but committed only
// where written. CreateOn lays them over memory the caller holds (a shared region that a
// prefill worker maps: it summarizes the keys it writes, and the decode side reads them).
//
// Goals: a bound that is exact arithmetic on stored values (min, max, products summed in a
// fixed order), so scores are the same on every thread count, split and machine.
// Non-goals: choosing pages (the pager), values (V does not enter the bound).
//
// Thread safety: Update and UpperBound on distinct (page, layer, head) may run
// concurrently (the forward pass gives each kv head its own task); the others are the
// stage owner's, between batches. Over shared memory, two processes update distinct pages
// (a prefill worker's sequences' and the decode side's).
// Lifetime: owned by the stage next to its pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/huge_pages.h"
#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm {

class KeySummaries {
 public:
  // Summaries for pages [0, n_pages) of pools shaped like `frames` (layers, heads, dims).
  static Result<std::unique_ptr<KeySummaries>> Create(const PagePoolConfig& frames, int n_pages);
  // Bytes CreateOn lays the summaries of n_pages pages shaped like `frames` over.
  static size_t Bytes(const PagePoolConfig& frames, int n_pages);
  // The same over `memory` (Bytes() long, zeroed when nothing was summarized in it yet),
  // which the caller keeps alive and mapped as long as the summaries.
  static Result<std::unique_ptr<KeySummaries>> CreateOn(const PagePoolConfig& frames, int n_pages,
                                                        std::span<uint8_t> memory);
  KeySummaries(const KeySummaries&) = delete;
  KeySummaries& operator=(const KeySummaries&) = delete;

  int n_pages() const { return n_pages_; }

  // Position `offset` of `page` was written in `layer` for kv head `head`: adds its stored
  // key to the summary (rebuilding from rows [0, offset) when the summary does not end at
  // offset). bytes: the page's bytes in the layout of `layout` (a frame of the pool).
  void Update(PageId page, const uint8_t* bytes, const PagePool& layout, int layer, int head,
              int offset);
  // The whole page (every layer and head), from its first n_valid stored rows: a page that
  // arrived whole (imported from disk or a slot file).
  void Rebuild(PageId page, const uint8_t* bytes, const PagePool& layout, int n_valid);
  // dst's summaries become src's (copy-on-write copies the page).
  void Copy(PageId src, PageId dst);
  // The page holds nothing any more.
  void Forget(PageId page);
  // Positions summarized for (page, layer, head); 0: no summary.
  int summarized(PageId page, int layer, int head) const {
    return counts_[Index(page, layer, head)];
  }

  // Σ_c max(q_c·min_c, q_c·max_c) for the keys of (page, layer, head), summed in a fixed order;
  // -infinity when the page has no summary there.
  float UpperBound(PageId page, int layer, int head, const float* q) const;

 private:
  KeySummaries(const PagePoolConfig& shape, int n_pages);
  static Status CheckShape(const PagePoolConfig& frames, int n_pages);
  size_t n_boxes() const { return size_t(n_pages_) * n_layers_ * n_kv_heads_; }
  size_t Index(PageId page, int layer, int head) const {
    return (size_t(page) * n_layers_ + size_t(layer)) * n_kv_heads_ + size_t(head);
  }
  float* Box(size_t index) { return boxes_ + index * 2 * head_dim_; }
  const float* Box(size_t index) const { return boxes_ + index * 2 * head_dim_; }
  void AddRow(size_t index, const float* row, int head_dim, bool first);

  int n_pages_;
  int n_layers_;
  int n_kv_heads_;  // the widest layer's: boxes are laid out for it
  int head_dim_;
  KvType kv_type_;
  std::vector<KvLayerShape> layers_;  // each layer's own heads and dims (a prefix of a box)
  float* boxes_ = nullptr;            // [page][layer][head] → min[head_dim], max[head_dim]
  uint16_t* counts_ = nullptr;        // [page][layer][head] → positions summarized
  HugePageBuffer own_boxes_;          // Create's memory (CreateOn's is the caller's)
  std::vector<uint16_t> own_counts_;
};

}  // namespace shardlm
