// BlockTable: one sequence's map from logical page index to page ids of a PageAllocator.
//
// Logical page i covers positions [i × page_tokens, (i+1) × page_tokens). The table also
// records how many leading positions hold valid KV (`n_tokens`): a batch may append at
// n_tokens or rewrite from an earlier position (which drops everything after it).
//
// The table holds ids only, never contents: the same ids are valid in every stage's
// PagePool (one allocator per pipeline), so page_list() is what each stage's forward pass
// reads and writes. Copy-on-write is two-step: PrepareWrite swaps a shared page for a new
// id and reports {src, dst} in a PageCopy; the caller copies the contents in every stage
// (PagePool::CopyPage) before the batch runs.
//
// Goals: allocate pages as a sequence grows (OutOfRange from the allocator when it is
// full, with the table unchanged); share pages between tables with refcounts (Fork,
// AppendSharedPage) and give each writer a private page before it writes; give pages back
// on Truncate, Clear and destruction.
// Non-goals: page contents (PagePool), choosing which prefix to share (cache/), residency
// in a bounded pool (kv/pager.h).
//
// Thread safety: not thread-safe; owned by the scheduler's thread.
// Lifetime: holds a reference on each of its pages until truncated or destroyed; the
// allocator must outlive it. page_list() is valid until the table next changes its pages.
// Move-only; copying is the explicit Fork().
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kv/page_allocator.h"
#include "kv/page_pool.h"

namespace shardlm {

class BlockTable {
 public:
  explicit BlockTable(PageAllocator* allocator);
  ~BlockTable();
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  PageAllocator* allocator() const { return allocator_; }
  int n_tokens() const { return n_tokens_; }
  int n_pages() const { return static_cast<int>(pages_.size()); }
  int capacity_tokens() const { return n_pages() * allocator_->page_tokens(); }
  PageId page(int logical_idx) const { return pages_[logical_idx]; }
  const std::vector<PageId>& pages() const { return pages_; }
  PageList page_list() const { return pages_; }

  // Makes positions [begin, end) writable: allocates missing pages, and replaces each
  // shared page (refcount > 1) in that range by a new page, appending {old, new} to
  // *copies (the old page is released; page contents are not touched). The caller applies
  // the copies to every stage's pool, in order, before writing. On OutOfRange the table and
  // *copies keep what they had. Requires begin <= n_tokens (no holes).
  Status PrepareWrite(int begin, int end, std::vector<PageCopy>* copies);
  // Marks positions [0, n) valid (after a forward pass wrote them); n <= capacity_tokens().
  void SetTokens(int n);
  // Keeps positions [0, n): releases pages wholly past n, n_tokens = min(n_tokens, n).
  void Truncate(int n);
  // Appends a page owned elsewhere (prefix-cache hit), taking a reference; the table must
  // end on a page boundary and the page must be full (n_tokens grows by page_tokens).
  void AppendSharedPage(PageId page);
  // Appends a page whose first n_valid positions (1..page_tokens) hold KV (a restored
  // sequence), taking a reference; the table must end on a page boundary.
  void AppendPage(PageId page, int n_valid);
  // A new table mapping the same pages (each retained) and the same n_tokens.
  BlockTable Fork() const;
  // Releases every page.
  void Clear();

 private:
  PageAllocator* allocator_;
  std::vector<PageId> pages_;  // [logical page index] → page id
  int n_tokens_ = 0;
};

}  // namespace shardlm
