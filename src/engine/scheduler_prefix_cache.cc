// SchedulerPrefixCache implementation: admission lookup, the disk load task, publishing
// full pages, eviction and counters (see scheduler_prefix_cache.h).
#include "engine/scheduler_prefix_cache.h"

#include <algorithm>

#include "engine/scheduler_impl.h"
#include "engine/scheduler_request.h"

namespace shardlm {

SchedulerPrefixCache::SchedulerPrefixCache(bool enabled, PageAllocator* allocator, int n_slots,
                                           int page_tokens, const Fingerprint128& fingerprint,
                                           SchedulerDiskCache* disk, Pager* pager,
                                           RecurrentCheckpoints* recurrent)
    : allocator_(allocator),
      disk_(enabled ? disk : nullptr),
      pager_(pager),
      recurrent_(recurrent != nullptr && recurrent->enabled() ? recurrent : nullptr),
      fingerprint_(fingerprint),
      page_tokens_(page_tokens),
      chains_(size_t(n_slots)) {
  if (enabled) index_ = std::make_unique<PrefixIndex>(allocator);
}

SchedulerPrefixCache::~SchedulerPrefixCache() {
  // What the disk had no room for is written now, as a restart will want it.
  while (disk_ && CatchUpPersist()) (void)disk_->WaitForExports();
}

void SchedulerPrefixCache::PersistBlock(const BlockHash& hash, const BlockHash& parent,
                                        PageId page) {
  if (unpersisted_.empty() && disk_->Persist(hash, parent, page)) return;
  if (unpersisted_.size() >= kMaxUnpersisted) {
    disk_->Dropped();
    return;
  }
  unpersisted_.emplace_back(hash, parent);
}

bool SchedulerPrefixCache::CatchUpPersist() {
  if (!disk_ || unpersisted_.empty()) return false;
  disk_->ReleaseExported();
  while (!unpersisted_.empty()) {
    const auto& [hash, parent] = unpersisted_.front();
    const PageId page = index_->PageOf(hash);
    if (page != kNoPage && !disk_->Persist(hash, parent, page)) return true;
    unpersisted_.pop_front();
  }
  return false;
}

void SchedulerPrefixCache::Admit(int slot, ActiveRequest& request, BlockTable& table) {
  Chain& chain = chains_[slot];
  ReleasePending(chain);
  chain.hashes.clear();
  chain.n_published = 0;
  chain.publishing = enabled();
  chain.loading = false;
  chain.memory_blocks = 0;
  if (!enabled()) return;
  if (disk_) disk_->ReleaseExported();
  chain.hashes = ChainBlockHashes(request.request().prompt, page_tokens_, fingerprint_);
  // Cached positions would give no output rows.
  if (request.prompt_outputs().any()) return FinishAdmit(slot, request, table);
  PrefixHit hit = index_->Lookup(chain.hashes);
  for (PageId page : hit.pages()) table.AppendSharedPage(page);
  chain.n_published = hit.n_blocks();
  chain.memory_blocks = hit.n_blocks();
  const size_t next = size_t(hit.n_blocks());
  chain.loading = disk_ && next < chain.hashes.size() && disk_->Contains(chain.hashes[next]);
  if (!chain.loading) FinishAdmit(slot, request, table);
}

void SchedulerPrefixCache::FinishAdmit(int slot, ActiveRequest& request, BlockTable& table) {
  Chain& chain = chains_[slot];
  chain.loading = false;
  const int last = request.n_prompt() - 1;
  if (recurrent_ != nullptr) {
    // Whole blocks short of the last prompt token: the state resumes exactly at their end.
    const int usable = std::min(table.n_tokens(), last) / page_tokens_;
    const int resumed = recurrent_->Resume(slot, chain.hashes, usable);
    table.Truncate(resumed * page_tokens_);
    chain.n_published = std::min(chain.n_published, resumed);
    chain.memory_blocks = std::min(chain.memory_blocks, resumed);
  }
  const int cached = std::min(table.n_tokens(), last);
  const int memory = std::min(chain.memory_blocks * page_tokens_, last);
  request.SetCached(cached, cached - memory);
  prompt_tokens_memory_ += memory;
  prompt_tokens_disk_ += cached - memory;
  if (pager_ != nullptr && table.n_pages() > 0) AdoptSelection(slot, chain.hashes, table.n_pages());
}

void SchedulerPrefixCache::AdoptSelection(int slot, std::span<const BlockHash> hashes,
                                          int n_blocks) {
  for (int b = n_blocks - 1; b >= 0; --b) {
    auto kept = selections_.find(hashes[b]);
    if (kept == selections_.end() && disk_ && disk_->ContainsSelection(hashes[b])) {
      Result<PageSelection> loaded = disk_->LoadSelection(hashes[b]);
      if (!loaded.ok() || loaded->n_pages() != b + 1) continue;
      kept = selections_.emplace(hashes[b], std::move(loaded).value()).first;
    }
    if (kept == selections_.end()) continue;
    pager_->BeginSequence(slot, &kept->second, n_blocks);
    return;
  }
  pager_->BeginSequence(slot, nullptr, n_blocks);
}

void SchedulerPrefixCache::RememberSequence(int slot, Pipeline* state_source) {
  const Chain& chain = chains_[slot];
  if (!enabled() || chain.n_published == 0) return;
  const BlockHash& last = chain.hashes[size_t(chain.n_published - 1)];
  if (pager_ != nullptr) KeepSelection(last, pager_->Record(slot, chain.n_published));
  if (recurrent_ != nullptr) recurrent_->Remember(slot, last, chain.n_published, state_source);
}

void SchedulerPrefixCache::KeepSelection(const BlockHash& hash, PageSelection selection) {
  if (selections_.contains(hash) || (disk_ && disk_->ContainsSelection(hash))) return;
  if (disk_) disk_->PersistSelection(hash, selection);
  selections_.emplace(hash, std::move(selection));
  // A selection goes with its block: one whose block left the memory cache is read from
  // disk, if anywhere, when wanted again.
  std::erase_if(selections_, [&](const auto& kept) { return !index_->Contains(kept.first); });
}

TaskState SchedulerPrefixCache::LoadStep(int slot, ActiveRequest& request, BlockTable& table,
                                         int& page_budget, uint64_t submitted, uint64_t collected) {
  Chain& chain = chains_[slot];
  while (chain.loading) {
    const int i = table.n_pages();
    if (i >= int(chain.hashes.size()) || !disk_->Contains(chain.hashes[i])) break;
    if (page_budget <= 0) return TaskState::kBlocked;
    if (chain.pending == kNoPage) {
      Result<PageId> page = allocator_->Allocate();
      if (!page.ok() && Evict(1) > 0) page = allocator_->Allocate();
      if (!page.ok()) break;  // no room: prefill the rest
      chain.pending = *page;
      chain.fence = submitted;
    }
    if (collected < chain.fence) return TaskState::kNotFinished;
    if (pager_ != nullptr && !pager_->ReadyToImport(chain.pending, collected)) {
      return TaskState::kNotFinished;
    }
    --page_budget;
    if (!disk_->Load(chain.hashes[i], chain.pending).ok()) break;
    const BlockHash parent = i > 0 ? chain.hashes[i - 1] : kRootBlockHash;
    // Already cached (another slot loaded it meanwhile): this copy is as good.
    (void)index_->Publish(chain.hashes[i], parent, chain.pending);
    table.AppendSharedPage(chain.pending);
    ReleasePending(chain);
    chain.n_published = i + 1;
  }
  ReleasePending(chain);
  FinishAdmit(slot, request, table);
  return TaskState::kFinished;
}

void SchedulerPrefixCache::ReleasePending(Chain& chain) {
  if (chain.pending == kNoPage) return;
  allocator_->Release(chain.pending);
  chain.pending = kNoPage;
}

void SchedulerPrefixCache::EndSlot(int slot) {
  Chain& chain = chains_[slot];
  ReleasePending(chain);
  chain.loading = false;
}

void SchedulerPrefixCache::PublishFullPages(int slot, const ActiveRequest& request,
                                            const BlockTable& table, int written_end) {
  Chain& chain = chains_[slot];
  if (disk_) disk_->ReleaseExported();
  const int n_full = std::min(written_end, table.n_tokens()) / page_tokens_;
  std::vector<TokenId> block(size_t(page_tokens_), 0);
  while (chain.publishing && chain.n_published < n_full) {
    const int i = chain.n_published;
    const BlockHash parent = i > 0 ? chain.hashes[i - 1] : kRootBlockHash;
    // Only a chain of the index's own pages keeps every unheld cached page evictable.
    if (i > 0 && index_->PageOf(parent) != table.page(i - 1)) {
      chain.publishing = false;
      break;
    }
    if (i == int(chain.hashes.size())) {
      for (int k = 0; k < page_tokens_; ++k) block[k] = request.TokenAt(i * page_tokens_ + k);
      chain.hashes.push_back(ChainBlockHash(parent, block, fingerprint_));
    }
    const PublishOutcome published = index_->Publish(chain.hashes[i], parent, table.page(i));
    if (disk_ && published == PublishOutcome::kPublished) {
      PersistBlock(chain.hashes[i], parent, table.page(i));
    }
    ++chain.n_published;
  }
}

void SchedulerPrefixCache::AdoptRestored(std::span<const TokenId> tokens,
                                         std::vector<PageId>& pages, const PageSelection* selection,
                                         std::span<const uint8_t> state) {
  if (!enabled()) return;
  if (disk_) disk_->ReleaseExported();
  const std::vector<BlockHash> hashes = ChainBlockHashes(tokens, page_tokens_, fingerprint_);
  // Every block maps the index's own page once this loop has passed it, so each publish
  // finds its parent cached as the page before it (every unheld cached page stays evictable).
  for (size_t i = 0; i < hashes.size(); ++i) {
    const BlockHash parent = i > 0 ? hashes[i - 1] : kRootBlockHash;
    const PageId cached = index_->PageOf(hashes[i]);
    if (cached != kNoPage) {
      allocator_->Retain(cached);
      allocator_->Release(pages[i]);
      pages[i] = cached;
      continue;
    }
    if (index_->Publish(hashes[i], parent, pages[i]) == PublishOutcome::kPublished && disk_) {
      PersistBlock(hashes[i], parent, pages[i]);
    }
  }
  if (selection != nullptr && pager_ != nullptr && !hashes.empty() &&
      selection->n_pages() >= int(hashes.size())) {
    PageSelection kept = *selection;
    kept.Truncate(int(hashes.size()));
    KeepSelection(hashes.back(), std::move(kept));
  }
  if (recurrent_ != nullptr && !state.empty() && !hashes.empty()) {
    recurrent_->Adopt(hashes.back(), int(hashes.size()), state);
  }
}

int SchedulerPrefixCache::Evict(int n_pages) {
  if (!enabled()) return 0;
  const int evicted = index_->EvictUnreferenced(n_pages);
  if (evicted > 0 || !disk_ || !disk_->WaitForExports()) return evicted;
  return index_->EvictUnreferenced(n_pages);
}

void SchedulerPrefixCache::ForgetPages(const std::function<bool(PageId)>& drop) {
  if (!enabled()) return;
  index_->ErasePages(drop);
  std::erase_if(selections_, [&](const auto& kept) { return !index_->Contains(kept.first); });
}

void SchedulerPrefixCache::Clear() {
  if (!enabled()) return;
  if (recurrent_ != nullptr) recurrent_->Clear();
  if (disk_) disk_->Clear();
  index_->Clear();
  selections_.clear();
  unpersisted_.clear();
}

int SchedulerPrefixCache::n_cached_only() const {
  return enabled() ? index_->CountUnreferenced() : 0;
}

void SchedulerPrefixCache::FillStats(EngineStats& stats) const {
  stats.prompt_tokens_cached = prompt_tokens_memory_ + prompt_tokens_disk_;
  stats.prompt_tokens_memory = prompt_tokens_memory_;
  stats.prompt_tokens_disk = prompt_tokens_disk_;
  if (!enabled()) return;
  const PrefixIndexStats& cache = index_->stats();
  stats.prefix_cache_lookup_blocks = cache.lookup_blocks;
  stats.prefix_cache_hit_blocks = cache.hit_blocks;
  stats.prefix_cache_evicted_pages = cache.evicted;
  stats.prefix_cache_pages = index_->size();
}

}  // namespace shardlm
