// SchedulerPrefixCache implementation: admission lookup, publishing full pages, eviction
// and counters (see scheduler_prefix_cache.h).
#include "runtime/scheduler_prefix_cache.h"

#include <algorithm>

#include "runtime/scheduler_request.h"

namespace shardlm {

SchedulerPrefixCache::SchedulerPrefixCache(bool enabled, PageAllocator* allocator, int n_slots,
                                           int page_tokens, const Fingerprint128& fingerprint)
    : fingerprint_(fingerprint), page_tokens_(page_tokens), chains_(size_t(n_slots)) {
  if (enabled) index_ = std::make_unique<PrefixIndex>(allocator);
}

void SchedulerPrefixCache::Admit(int slot, ActiveRequest& request, BlockTable& table) {
  Chain& chain = chains_[slot];
  chain.hashes.clear();
  chain.n_published = 0;
  chain.publishing = enabled();
  if (!enabled()) return;
  chain.hashes = ChainBlockHashes(request.request().prompt, page_tokens_, fingerprint_);
  PrefixHit hit = index_->Lookup(chain.hashes);
  for (PageId page : hit.pages()) table.AppendSharedPage(page);
  chain.n_published = hit.n_blocks();
  const int cached = std::min(table.n_tokens(), request.n_prompt() - 1);
  request.SetCached(cached);
  prompt_tokens_cached_ += cached;
}

void SchedulerPrefixCache::PublishFullPages(int slot, const ActiveRequest& request,
                                            const BlockTable& table, int written_end) {
  Chain& chain = chains_[slot];
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
    (void)index_->Publish(chain.hashes[i], parent, table.page(i));
    ++chain.n_published;
  }
}

int SchedulerPrefixCache::Evict(int n_pages) {
  return enabled() ? index_->EvictUnreferenced(n_pages) : 0;
}

void SchedulerPrefixCache::Clear() {
  if (enabled()) index_->Clear();
}

int SchedulerPrefixCache::n_cached_only() const {
  return enabled() ? index_->CountUnreferenced() : 0;
}

void SchedulerPrefixCache::FillStats(EngineStats& stats) const {
  stats.prompt_tokens_cached = prompt_tokens_cached_;
  if (!enabled()) return;
  const PrefixIndexStats& cache = index_->stats();
  stats.prefix_cache_lookup_blocks = cache.lookup_blocks;
  stats.prefix_cache_hit_blocks = cache.hit_blocks;
  stats.prefix_cache_evicted_pages = cache.evicted;
  stats.prefix_cache_pages = index_->size();
}

}  // namespace shardlm
