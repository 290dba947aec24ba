// PageAllocator: free list and reference counts of a pipeline's page ids (see
// page_allocator.h).
#include "kv/page_allocator.h"

#include "base/check.h"

namespace shardlm {

PageAllocator::PageAllocator(int n_pages, int page_tokens)
    : page_tokens_(page_tokens), refcounts_(n_pages, 0) {
  free_list_.reserve(n_pages);
  // Lowest id on top, so pages are handed out 0, 1, 2, ... from a fresh allocator.
  for (PageId page = n_pages - 1; page >= 0; --page) free_list_.push_back(page);
}

Result<std::unique_ptr<PageAllocator>> PageAllocator::Create(int n_pages, int page_tokens) {
  if (n_pages <= 0 || page_tokens <= 0) {
    return InvalidArgument("KV pages: n_pages ({}) and page_tokens ({}) must be positive", n_pages,
                           page_tokens);
  }
  return std::unique_ptr<PageAllocator>(new PageAllocator(n_pages, page_tokens));
}

Result<PageId> PageAllocator::Allocate() {
  if (free_list_.empty()) {
    return OutOfRange("KV pool exhausted: all {} pages of {} tokens are in use (raise --kv-pages)",
                      n_pages(), page_tokens_);
  }
  const PageId page = free_list_.back();
  free_list_.pop_back();
  SHARDLM_CHECK(refcounts_[page] == 0);
  refcounts_[page] = 1;
  return page;
}

void PageAllocator::Retain(PageId page) {
  SHARDLM_CHECK(page >= 0 && page < n_pages() && refcounts_[page] > 0);
  ++refcounts_[page];
}

void PageAllocator::Release(PageId page) {
  SHARDLM_CHECK(page >= 0 && page < n_pages() && refcounts_[page] > 0);
  if (--refcounts_[page] != 0) return;
  free_list_.push_back(page);
  if (free_hook_) free_hook_(page);
}

int PageAllocator::refcount(PageId page) const {
  SHARDLM_CHECK(page >= 0 && page < n_pages());
  return refcounts_[page];
}

}  // namespace shardlm
