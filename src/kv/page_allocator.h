// PageAllocator: hands out the page ids of a pipeline and counts who holds each one.
//
// Page ids are [0, n_pages). One allocator serves every stage of a pipeline: each stage's
// PagePool stores the same logical page under the same id, so a sequence's page list
// (kv/block_table.h) is valid in every stage, local or remote.
//
// Goals: KV memory bounded by configuration (n_pages), never by the prompt: running out of
// pages is an OutOfRange error that names the limit and the flag to raise; reference counts
// so that several block tables can share a page (prefix sharing, forks); O(1) allocate and
// release.
// Non-goals: page contents (PagePool, one per stage), residency in a bounded pool
// (kv/pager.h, told of freed pages by the free hook), content hashing (cache/), deciding which
// sequence gets pages (the scheduler).
//
// Thread safety: not thread-safe; the scheduler's thread owns it.
// Lifetime: a PageId is valid while its refcount > 0; block tables reference the allocator,
// which must outlive them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kv/page_pool.h"

namespace shardlm {

class PageAllocator {
 public:
  // Errors: n_pages or page_tokens not positive (InvalidArgument).
  static Result<std::unique_ptr<PageAllocator>> Create(int n_pages, int page_tokens);
  PageAllocator(const PageAllocator&) = delete;
  PageAllocator& operator=(const PageAllocator&) = delete;

  int n_pages() const { return int(refcounts_.size()); }
  int page_tokens() const { return page_tokens_; }
  int n_free() const { return int(free_list_.size()); }

  // A free page with refcount 1, or OutOfRange when every page is in use.
  Result<PageId> Allocate();
  // Refcount +1 (another block table maps the page). The page must be in use.
  void Retain(PageId page);
  // Refcount −1; the page returns to the free list at 0 (and the free hook hears of it).
  void Release(PageId page);
  // Called with each page whose refcount reaches 0 (a bounded pool's pager forgets it).
  void SetFreeHook(std::function<void(PageId)> hook) { free_hook_ = std::move(hook); }
  int refcount(PageId page) const;

 private:
  PageAllocator(int n_pages, int page_tokens);

  int page_tokens_;
  std::vector<int32_t> refcounts_;  // [n_pages]
  std::vector<PageId> free_list_;   // stack; top = next page handed out
  std::function<void(PageId)> free_hook_;
};

}  // namespace shardlm
