// BlockTable: a sequence's logical pages, with copy-on-write of shared pages (see
// block_table.h).
#include "kv/block_table.h"

#include <algorithm>

#include "base/check.h"

namespace shardlm {

BlockTable::BlockTable(PageAllocator* allocator) : allocator_(allocator) {
  SHARDLM_CHECK(allocator != nullptr);
}

BlockTable::~BlockTable() { Clear(); }

BlockTable::BlockTable(BlockTable&& other) noexcept
    : allocator_(other.allocator_), pages_(std::move(other.pages_)), n_tokens_(other.n_tokens_) {
  other.pages_.clear();
  other.n_tokens_ = 0;
}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    Clear();
    allocator_ = other.allocator_;
    pages_ = std::move(other.pages_);
    n_tokens_ = other.n_tokens_;
    other.pages_.clear();
    other.n_tokens_ = 0;
  }
  return *this;
}

Status BlockTable::PrepareWrite(int begin, int end, std::vector<PageCopy>* copies) {
  SHARDLM_CHECK(copies != nullptr);
  SHARDLM_CHECK(begin >= 0 && begin <= end && begin <= n_tokens_);
  if (begin == end) return Status::Ok();
  const int page_tokens = allocator_->page_tokens();
  const int first_page = begin / page_tokens;
  const int last_page = (end - 1) / page_tokens;
  // Count what is needed first, so that a failure leaves the table unchanged.
  int needed = std::max(0, last_page + 1 - n_pages());
  for (int i = first_page; i < std::min(last_page + 1, n_pages()); ++i) {
    if (allocator_->refcount(pages_[i]) > 1) ++needed;
  }
  if (needed > allocator_->n_free()) {
    return OutOfRange(
        "KV pool exhausted: positions [{}, {}) need {} more pages but only {} of {} are free "
        "(raise --kv-pages)",
        begin, end, needed, allocator_->n_free(), allocator_->n_pages());
  }
  for (int i = first_page; i < std::min(last_page + 1, n_pages()); ++i) {
    if (allocator_->refcount(pages_[i]) == 1) continue;
    SHARDLM_ASSIGN_OR_RETURN(PageId copy, allocator_->Allocate());
    copies->push_back({pages_[i], copy});
    allocator_->Release(pages_[i]);
    pages_[i] = copy;
  }
  while (n_pages() <= last_page) {
    SHARDLM_ASSIGN_OR_RETURN(PageId page, allocator_->Allocate());
    pages_.push_back(page);
  }
  return Status::Ok();
}

void BlockTable::SetTokens(int n) {
  SHARDLM_CHECK(n >= 0 && n <= capacity_tokens());
  n_tokens_ = n;
}

void BlockTable::Truncate(int n) {
  SHARDLM_CHECK(n >= 0);
  const int page_tokens = allocator_->page_tokens();
  const int keep_pages = (n + page_tokens - 1) / page_tokens;
  while (n_pages() > keep_pages) {
    allocator_->Release(pages_.back());
    pages_.pop_back();
  }
  n_tokens_ = std::min(n_tokens_, n);
}

void BlockTable::AppendSharedPage(PageId page) { AppendPage(page, allocator_->page_tokens()); }

void BlockTable::AppendPage(PageId page, int n_valid) {
  SHARDLM_CHECK(n_tokens_ == capacity_tokens());
  SHARDLM_CHECK(n_valid >= 1 && n_valid <= allocator_->page_tokens());
  allocator_->Retain(page);
  pages_.push_back(page);
  n_tokens_ += n_valid;
}

BlockTable BlockTable::Fork() const {
  BlockTable copy(allocator_);
  for (PageId page : pages_) allocator_->Retain(page);
  copy.pages_ = pages_;
  copy.n_tokens_ = n_tokens_;
  return copy;
}

void BlockTable::Clear() {
  if (allocator_ != nullptr) {
    for (PageId page : pages_) allocator_->Release(page);
  }
  pages_.clear();
  n_tokens_ = 0;
}

}  // namespace shardlm
