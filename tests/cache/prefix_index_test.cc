#include "cache/prefix_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"

namespace shardlm {
namespace {

constexpr Fingerprint128 kIndexModel{7, 11};
constexpr int kPageTokens = 4;

std::unique_ptr<PageAllocator> MakeAllocator(int n_pages) {
  auto allocator = PageAllocator::Create(n_pages, kPageTokens);
  EXPECT_TRUE(allocator.ok()) << allocator.status().message();
  return std::move(allocator).value();
}

std::vector<int32_t> Tokens(int n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class PrefixIndexTest : public ::testing::Test {
 protected:
  // A sequence that filled `hashes.size()` pages and publishes them all; returns the pages
  // (still held by the caller: one reference each).
  std::vector<PageId> FillAndPublish(const std::vector<BlockHash>& hashes) {
    std::vector<PageId> pages;
    BlockHash parent = kRootBlockHash;
    for (const BlockHash& hash : hashes) {
      auto page = allocator_->Allocate();
      EXPECT_TRUE(page.ok());
      pages.push_back(*page);
      EXPECT_EQ(index_.Publish(hash, parent, *page), PublishOutcome::kPublished);
      parent = hash;
    }
    return pages;
  }
  void ReleaseAll(const std::vector<PageId>& pages) {
    for (PageId p : pages) allocator_->Release(p);
  }

  std::unique_ptr<PageAllocator> allocator_ = MakeAllocator(16);
  PrefixIndex index_{allocator_.get()};
};

TEST_F(PrefixIndexTest, PublishTakesOneReferenceAndLookupOneMore) {
  const auto hashes = ChainBlockHashes(Tokens(12), kPageTokens, kIndexModel);
  const auto pages = FillAndPublish(hashes);
  for (PageId p : pages) EXPECT_EQ(allocator_->refcount(p), 2);  // sequence + index
  ReleaseAll(pages);                                             // the sequence finished
  for (PageId p : pages) EXPECT_EQ(allocator_->refcount(p), 1);
  EXPECT_EQ(index_.CountUnreferenced(), 3);
  {
    PrefixHit hit = index_.Lookup(hashes);
    ASSERT_EQ(hit.n_blocks(), 3);
    EXPECT_EQ(hit.pages(), pages);
    for (PageId p : pages) EXPECT_EQ(allocator_->refcount(p), 2);  // index + hit
    EXPECT_EQ(index_.CountUnreferenced(), 0);
  }
  for (PageId p : pages) EXPECT_EQ(allocator_->refcount(p), 1);  // the hit released its own
}

TEST_F(PrefixIndexTest, LookupReturnsTheLongestCachedLeadingChain) {
  const auto hashes = ChainBlockHashes(Tokens(16), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish({hashes[0], hashes[1]}));
  EXPECT_EQ(index_.Lookup(hashes).n_blocks(), 2);
  EXPECT_EQ(index_.Lookup(std::span(hashes).first(1)).n_blocks(), 1);
  EXPECT_EQ(index_.Lookup({}).n_blocks(), 0);

  // Another conversation diverging in block 1 shares block 0 only.
  auto other_tokens = Tokens(16);
  other_tokens[5] = 999;
  EXPECT_EQ(index_.Lookup(ChainBlockHashes(other_tokens, kPageTokens, kIndexModel)).n_blocks(), 1);
  // A chain that does not start at block 0 never hits, even if its hashes are cached.
  EXPECT_EQ(index_.Lookup(std::span(hashes).subspan(1)).n_blocks(), 0);
  // Another model shares nothing.
  EXPECT_EQ(index_.Lookup(ChainBlockHashes(Tokens(16), kPageTokens, {7, 12})).n_blocks(), 0);

  const PrefixIndexStats& s = index_.stats();
  EXPECT_EQ(s.lookups, 6);
  EXPECT_EQ(s.hit_blocks, 2 + 1 + 0 + 1 + 0 + 0);
  EXPECT_EQ(s.lookup_blocks, 4 + 1 + 0 + 4 + 3 + 4);
  EXPECT_EQ(s.published, 2);
}

TEST_F(PrefixIndexTest, PublishOutcomes) {
  const auto hashes = ChainBlockHashes(Tokens(12), kPageTokens, kIndexModel);
  auto a = allocator_->Allocate();
  auto b = allocator_->Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  // Block 1 before block 0: it would be unreachable, so the index takes nothing.
  EXPECT_EQ(index_.Publish(hashes[1], hashes[0], *b), PublishOutcome::kParentMissing);
  EXPECT_EQ(allocator_->refcount(*b), 1);
  EXPECT_EQ(index_.Publish(hashes[0], kRootBlockHash, *a), PublishOutcome::kPublished);
  // A second sequence computed the same block into another page: the first page stays.
  EXPECT_EQ(index_.Publish(hashes[0], kRootBlockHash, *b), PublishOutcome::kAlreadyCached);
  EXPECT_EQ(allocator_->refcount(*b), 1);
  EXPECT_EQ(index_.PageOf(hashes[0]), *a);
  EXPECT_EQ(index_.stats().published, 1);
  allocator_->Release(*a);
  allocator_->Release(*b);
}

TEST_F(PrefixIndexTest, TwoSequencesShareAPrefixThroughTheirBlockTables) {
  const auto prompt = Tokens(10);  // two full pages and a partial one
  const auto hashes = ChainBlockHashes(prompt, kPageTokens, kIndexModel);
  ASSERT_EQ(hashes.size(), 2u);
  const int free_at_start = allocator_->n_free();

  std::vector<PageCopy> copies;
  BlockTable first(allocator_.get());
  ASSERT_TRUE(first.PrepareWrite(0, 10, &copies).ok());
  first.SetTokens(10);
  EXPECT_EQ(index_.Publish(hashes[0], kRootBlockHash, first.page(0)), PublishOutcome::kPublished);
  EXPECT_EQ(index_.Publish(hashes[1], hashes[0], first.page(1)), PublishOutcome::kPublished);

  BlockTable second(allocator_.get());
  {
    PrefixHit hit = index_.Lookup(hashes);
    ASSERT_EQ(hit.n_blocks(), 2);
    for (PageId page : hit.pages()) second.AppendSharedPage(page);
  }
  EXPECT_EQ(second.n_tokens(), 8);
  EXPECT_EQ(second.page(0), first.page(0));
  EXPECT_EQ(second.page(1), first.page(1));
  // index + first table + second table; the hit's references are gone.
  EXPECT_EQ(allocator_->refcount(first.page(0)), 3);
  EXPECT_EQ(allocator_->refcount(first.page(1)), 3);
  // Only the partial page was allocated twice: 3 pages for the first, 1 for the second.
  ASSERT_TRUE(second.PrepareWrite(8, 10, &copies).ok());
  EXPECT_TRUE(copies.empty());  // shared full pages are never written
  EXPECT_EQ(allocator_->n_free(), free_at_start - 4);

  // Nothing is evictable while the sequences hold the pages.
  EXPECT_EQ(index_.EvictUnreferenced(10), 0);
  first.Clear();
  EXPECT_EQ(index_.EvictUnreferenced(10), 0);
  second.Clear();
  EXPECT_EQ(allocator_->n_free(), free_at_start - 2);  // the cached pages stay
  EXPECT_EQ(index_.EvictUnreferenced(10), 2);
  EXPECT_EQ(allocator_->n_free(), free_at_start);  // capacity back to its baseline
  EXPECT_EQ(index_.size(), 0);
}

TEST_F(PrefixIndexTest, RewritingInsideACachedPageCopiesItAndTheCacheKeepsTheOriginal) {
  const auto hashes = ChainBlockHashes(Tokens(8), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(hashes));
  const PageId cached = index_.PageOf(hashes[1]);
  BlockTable table(allocator_.get());
  {
    PrefixHit hit = index_.Lookup(hashes);
    for (PageId page : hit.pages()) table.AppendSharedPage(page);
  }
  // The sequence diverges at position 6 (inside block 1): it must not write the cached page.
  std::vector<PageCopy> copies;
  ASSERT_TRUE(table.PrepareWrite(6, 8, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, cached);
  EXPECT_NE(table.page(1), cached);
  EXPECT_EQ(index_.PageOf(hashes[1]), cached);
  EXPECT_EQ(allocator_->refcount(cached), 1);  // the index alone again
}

TEST_F(PrefixIndexTest, EvictsLeastRecentlyUsedLeavesFirst) {
  // Three independent one-block chains a, b, c published in that order.
  const auto a = ChainBlockHashes(Tokens(4, 0), kPageTokens, kIndexModel);
  const auto b = ChainBlockHashes(Tokens(4, 100), kPageTokens, kIndexModel);
  const auto c = ChainBlockHashes(Tokens(4, 200), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(a));
  ReleaseAll(FillAndPublish(b));
  ReleaseAll(FillAndPublish(c));
  EXPECT_EQ(index_.Lookup(a).n_blocks(), 1);  // a is now the most recently used
  EXPECT_EQ(index_.EvictUnreferenced(1), 1);
  EXPECT_FALSE(index_.Contains(b[0]));
  EXPECT_EQ(index_.EvictUnreferenced(1), 1);
  EXPECT_FALSE(index_.Contains(c[0]));
  EXPECT_TRUE(index_.Contains(a[0]));
  EXPECT_EQ(index_.stats().evicted, 2);
}

TEST_F(PrefixIndexTest, EvictsAChainFromItsTail) {
  const auto chain = ChainBlockHashes(Tokens(12), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(chain));
  const auto other = ChainBlockHashes(Tokens(4, 500), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(other));  // used after the whole chain
  // The chain's blocks are older than `other`; its tail goes first, then its parents,
  // within one call (a freed leaf's parent becomes a candidate at once).
  EXPECT_EQ(index_.EvictUnreferenced(1), 1);
  EXPECT_FALSE(index_.Contains(chain[2]));
  EXPECT_TRUE(index_.Contains(chain[1]));
  EXPECT_EQ(index_.EvictUnreferenced(2), 2);
  EXPECT_TRUE(index_.Contains(other[0]));  // chain[0] and chain[1] were used earlier
  EXPECT_EQ(index_.size(), 1);
}

TEST_F(PrefixIndexTest, WhatRemainsOfAnEvictedChainIsReachable) {
  const auto chain = ChainBlockHashes(Tokens(12), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(chain));
  EXPECT_EQ(index_.EvictUnreferenced(1), 1);
  EXPECT_EQ(index_.Lookup(chain).n_blocks(), 2);
  // The lookup made blocks 0 and 1 recent; block 1 is now the chain's tail, then block 0.
  EXPECT_EQ(index_.EvictUnreferenced(1), 1);
  EXPECT_FALSE(index_.Contains(chain[1]));
  EXPECT_EQ(index_.Lookup(chain).n_blocks(), 1);
}

TEST_F(PrefixIndexTest, NeverEvictsPagesInUse) {
  const auto chain = ChainBlockHashes(Tokens(8), kPageTokens, kIndexModel);
  const auto pages = FillAndPublish(chain);  // the sequence still holds them
  const auto other = ChainBlockHashes(Tokens(4, 500), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(other));
  EXPECT_EQ(index_.EvictUnreferenced(10), 1);  // only `other`
  EXPECT_TRUE(index_.Contains(chain[0]));
  EXPECT_TRUE(index_.Contains(chain[1]));
  for (PageId p : pages) EXPECT_EQ(allocator_->refcount(p), 2);
  // A hit held by a caller also protects its pages.
  allocator_->Release(pages[1]);
  PrefixHit hit = index_.Lookup(chain);
  allocator_->Release(pages[0]);
  EXPECT_EQ(index_.EvictUnreferenced(10), 0);
  hit.Release();
  EXPECT_EQ(index_.EvictUnreferenced(10), 2);
  EXPECT_EQ(allocator_->n_free(), allocator_->n_pages());
}

TEST_F(PrefixIndexTest, AnInnerBlockStaysWhileADescendantIsCached) {
  const auto chain = ChainBlockHashes(Tokens(8), kPageTokens, kIndexModel);
  const auto pages = FillAndPublish(chain);
  allocator_->Release(pages[0]);  // block 0 unreferenced, block 1 still in use
  EXPECT_EQ(index_.EvictUnreferenced(10), 0);
  allocator_->Release(pages[1]);
  EXPECT_EQ(index_.EvictUnreferenced(10), 2);
}

TEST_F(PrefixIndexTest, EraseRemovesTheBlockAndItsDescendants) {
  const auto chain = ChainBlockHashes(Tokens(12), kPageTokens, kIndexModel);
  auto branch_tokens = Tokens(12);
  branch_tokens[9] = 77;  // shares blocks 0 and 1, differs in block 2
  const auto branch = ChainBlockHashes(branch_tokens, kPageTokens, kIndexModel);
  const auto pages = FillAndPublish(chain);
  auto extra = allocator_->Allocate();
  ASSERT_TRUE(extra.ok());
  ASSERT_EQ(index_.Publish(branch[2], branch[1], *extra), PublishOutcome::kPublished);
  EXPECT_EQ(index_.Erase(chain[1]), 3);  // chain[1], chain[2], branch[2]
  EXPECT_EQ(index_.Erase(chain[1]), 0);
  EXPECT_EQ(index_.size(), 1);
  EXPECT_EQ(index_.Lookup(chain).n_blocks(), 1);
  EXPECT_EQ(allocator_->refcount(pages[2]), 1);  // only the sequence now
  EXPECT_EQ(allocator_->refcount(*extra), 1);
  ReleaseAll(pages);
  allocator_->Release(*extra);
  EXPECT_EQ(index_.EvictUnreferenced(10), 1);
  EXPECT_EQ(allocator_->n_free(), allocator_->n_pages());
}

TEST_F(PrefixIndexTest, ClearAndDestructionReleaseTheIndexReferences) {
  const auto chain = ChainBlockHashes(Tokens(8), kPageTokens, kIndexModel);
  ReleaseAll(FillAndPublish(chain));
  EXPECT_LT(allocator_->n_free(), allocator_->n_pages());
  index_.Clear();
  EXPECT_EQ(allocator_->n_free(), allocator_->n_pages());
  EXPECT_EQ(index_.Lookup(chain).n_blocks(), 0);
  {
    PrefixIndex scoped(allocator_.get());
    auto page = allocator_->Allocate();
    ASSERT_TRUE(page.ok());
    ASSERT_EQ(scoped.Publish(chain[0], kRootBlockHash, *page), PublishOutcome::kPublished);
    allocator_->Release(*page);
  }
  EXPECT_EQ(allocator_->n_free(), allocator_->n_pages());
}

}  // namespace
}  // namespace shardlm
