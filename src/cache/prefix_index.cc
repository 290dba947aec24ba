#include "cache/prefix_index.h"

#include <iterator>

#include "base/check.h"

namespace shardlm {

PrefixHit::PrefixHit(PrefixHit&& other) noexcept
    : pages_(other.pages_), hit_pages_(std::move(other.hit_pages_)) {
  other.hit_pages_.clear();
}

PrefixHit& PrefixHit::operator=(PrefixHit&& other) noexcept {
  if (this != &other) {
    Release();
    pages_ = other.pages_;
    hit_pages_ = std::move(other.hit_pages_);
    other.hit_pages_.clear();
  }
  return *this;
}

void PrefixHit::Release() {
  for (PageId page : hit_pages_) pages_->Release(page);
  hit_pages_.clear();
}

bool PrefixIndex::LeafKeyLess::operator()(const LeafKey& a, const LeafKey& b) const {
  if (a.first != b.first) return a.first < b.first;
  if (a.second.hi != b.second.hi) return a.second.hi < b.second.hi;
  return a.second.lo < b.second.lo;
}

void PrefixIndex::Touch(const BlockHash& hash, Entry& entry) {
  const uint64_t now = ++tick_;
  if (entry.n_children == 0) {
    leaves_.erase({entry.last_use, hash});
    leaves_.insert({now, hash});
  }
  entry.last_use = now;
}

PublishOutcome PrefixIndex::Publish(const BlockHash& hash, const BlockHash& parent, PageId page) {
  SHARDLM_CHECK_MSG(page != kNoPage && pages_->refcount(page) >= 1,
                    "publishing page %d that the caller does not hold", page);
  if (auto it = entries_.find(hash); it != entries_.end()) {
    Touch(hash, it->second);
    return PublishOutcome::kAlreadyCached;
  }
  if (parent != kRootBlockHash) {
    auto parent_it = entries_.find(parent);
    if (parent_it == entries_.end()) return PublishOutcome::kParentMissing;
    Entry& p = parent_it->second;
    if (p.n_children++ == 0) leaves_.erase({p.last_use, parent});
  }
  pages_->Retain(page);
  Entry& entry = entries_[hash];
  entry.page = page;
  entry.parent = parent;
  entry.last_use = ++tick_;
  leaves_.insert({entry.last_use, hash});
  ++stats_.published;
  return PublishOutcome::kPublished;
}

PrefixHit PrefixIndex::Lookup(std::span<const BlockHash> hashes) {
  ++stats_.lookups;
  stats_.lookup_blocks += static_cast<int64_t>(hashes.size());
  std::vector<PageId> hit;
  BlockHash prev = kRootBlockHash;
  for (const BlockHash& hash : hashes) {
    auto it = entries_.find(hash);
    if (it == entries_.end() || it->second.parent != prev) break;
    pages_->Retain(it->second.page);
    hit.push_back(it->second.page);
    Touch(hash, it->second);
    prev = hash;
  }
  stats_.hit_blocks += static_cast<int64_t>(hit.size());
  return PrefixHit(pages_, std::move(hit));
}

void PrefixIndex::RemoveLeaf(const BlockHash& hash) {
  auto it = entries_.find(hash);
  SHARDLM_CHECK(it != entries_.end() && it->second.n_children == 0);
  const Entry entry = it->second;
  leaves_.erase({entry.last_use, hash});
  entries_.erase(it);
  pages_->Release(entry.page);
  if (entry.parent == kRootBlockHash) return;
  Entry& p = entries_.at(entry.parent);
  if (--p.n_children == 0) leaves_.insert({p.last_use, entry.parent});
}

int PrefixIndex::EvictUnreferenced(int n_pages_wanted) {
  int freed = 0;
  auto it = leaves_.begin();
  while (freed < n_pages_wanted && it != leaves_.end()) {
    const BlockHash hash = it->second;
    const Entry& entry = entries_.at(hash);
    if (pages_->refcount(entry.page) != 1) {  // a block table or a hit maps it
      ++it;
      continue;
    }
    const BlockHash parent = entry.parent;
    auto next = std::next(it);
    RemoveLeaf(hash);
    ++freed;
    // The parent may have become a leaf older than `next`: consider it first.
    if (auto p = entries_.find(parent); p != entries_.end() && p->second.n_children == 0) {
      auto parent_it = leaves_.find({p->second.last_use, parent});
      if (next == leaves_.end() || LeafKeyLess()(*parent_it, *next)) next = parent_it;
    }
    it = next;
  }
  stats_.evicted += freed;
  return freed;
}

int PrefixIndex::Erase(const BlockHash& hash) {
  if (!entries_.contains(hash)) return 0;
  std::unordered_multimap<BlockHash, BlockHash> children;  // parent → child
  for (const auto& [h, entry] : entries_) children.emplace(entry.parent, h);
  std::vector<BlockHash> subtree{hash};  // breadth first: parents before children
  for (size_t i = 0; i < subtree.size(); ++i) {
    auto [begin, end] = children.equal_range(subtree[i]);
    for (auto it = begin; it != end; ++it) subtree.push_back(it->second);
  }
  for (auto it = subtree.rbegin(); it != subtree.rend(); ++it) RemoveLeaf(*it);
  stats_.erased += static_cast<int64_t>(subtree.size());
  return static_cast<int>(subtree.size());
}

int PrefixIndex::ErasePages(const std::function<bool(PageId)>& drop) {
  std::vector<BlockHash> held;
  for (const auto& [hash, entry] : entries_) {
    if (drop(entry.page)) held.push_back(hash);
  }
  int erased = 0;
  for (const BlockHash& hash : held) erased += Erase(hash);  // 0 when under one erased already
  return erased;
}

void PrefixIndex::Clear() {
  for (const auto& [hash, entry] : entries_) pages_->Release(entry.page);
  entries_.clear();
  leaves_.clear();
}

PageId PrefixIndex::PageOf(const BlockHash& hash) const {
  auto it = entries_.find(hash);
  return it == entries_.end() ? kNoPage : it->second.page;
}

int PrefixIndex::CountUnreferenced() const {
  int n = 0;
  for (const auto& [hash, entry] : entries_) n += pages_->refcount(entry.page) == 1 ? 1 : 0;
  return n;
}

}  // namespace shardlm
