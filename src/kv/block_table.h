// BlockTable: one sequence's map from logical page index to the pages of one stage's pool.
//
// Logical page i covers positions [i × page_tokens, (i+1) × page_tokens). The table also
// records how many leading positions hold valid KV (`n_tokens`): a forward pass may append
// at n_tokens or rewrite from an earlier position (which drops everything after it).
//
// Goals: allocate pages as a sequence grows (OutOfRange from the pool when it is full);
// share pages between tables with refcounts (Fork, AppendSharedPage) and copy a shared page
// before it is written (copy-on-write); give pages back on Truncate and destruction.
// Non-goals: choosing which prefix to share (cache/), eviction (the pager, later).
//
// Thread safety: not thread-safe; owned by the scheduler's thread. Lifetime: holds a
// reference on each of its pages until truncated or destroyed; the pool must outlive it.
// Move-only; copying is the explicit Fork().
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm {

class BlockTable {
 public:
  explicit BlockTable(PagePool* pool);
  ~BlockTable();
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  PagePool* pool() const { return pool_; }
  int n_tokens() const { return n_tokens_; }
  int n_pages() const { return static_cast<int>(pages_.size()); }
  int capacity_tokens() const { return n_pages() * pool_->page_tokens(); }
  PageId page(int logical_idx) const { return pages_[logical_idx]; }
  const std::vector<PageId>& pages() const { return pages_; }

  // Makes positions [begin, end) writable: allocates missing pages and replaces shared
  // pages in that range by private copies. On OutOfRange the table keeps what it had.
  // Requires begin <= n_tokens (no holes).
  Status PrepareWrite(int begin, int end);
  // Marks positions [0, n) valid (after a forward pass wrote them); n <= capacity_tokens().
  void SetTokens(int n);
  // Keeps positions [0, n): releases pages wholly past n, n_tokens = min(n_tokens, n).
  void Truncate(int n);
  // Appends a page owned elsewhere (prefix-cache hit), taking a reference; the table must
  // end on a page boundary and the page must be full (n_tokens grows by page_tokens).
  void AppendSharedPage(PageId page);
  // A new table mapping the same pages (each retained) and the same n_tokens.
  BlockTable Fork() const;
  // Releases every page.
  void Clear();

 private:
  PagePool* pool_;
  std::vector<PageId> pages_;  // [logical page index] → page id
  int n_tokens_ = 0;
};

}  // namespace shardlm
