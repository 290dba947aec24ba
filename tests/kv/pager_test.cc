// Pager: while a context fits its pool every page is read; past it a slot keeps its sink,
// its tail and its writes resident, never more than its pool, and the rest by score (qk)
// or recency (lru); frames never run out; freed pages leave every set; a pool below the
// floor is refused naming the sizes; a sequence that continues a recorded one starts from
// its selection whichever slot it lands in.
#include "kv/pager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

namespace shardlm {
namespace pager_test {

constexpr int kPageTokens = 4;

PagerConfig Config(int pool_tokens, PageSelect select, int n_slots = 2) {
  PagerConfig c;
  c.n_pages = 256;
  c.page_tokens = kPageTokens;
  c.n_slots = n_slots;
  c.pool.pool_tokens = pool_tokens;
  c.pool.sink_tokens = 4;  // 1 page
  c.pool.tail_tokens = 8;  // 2 pages (3 when not page-aligned)
  c.pool.reselect_tokens = 4;
  c.pool.select = select;
  return c;
}

std::unique_ptr<Pager> MakePager(const PagerConfig& config) {
  auto pager = Pager::Create(config);
  EXPECT_TRUE(pager.ok()) << pager.status().message();
  return std::move(pager).value();
}

// Pages [first, first + n) as a block table would list them.
std::vector<PageId> Pages(int first, int n) {
  std::vector<PageId> pages(static_cast<size_t>(n));
  std::iota(pages.begin(), pages.end(), first);
  return pages;
}

std::vector<int32_t> Attended(const Pager& pager, int slot) {
  AttendedPages a = pager.attended(slot);
  return std::vector<int32_t>(a.begin(), a.end());
}

TEST(Pager, APoolBelowItsFloorIsRefusedNamingTheSizes) {
  PagerConfig c = Config(16, PageSelect::kLru);  // 4 pages < 1 sink + 2 tail + 2
  Result<std::unique_ptr<Pager>> pager = Pager::Create(c);
  ASSERT_EQ(pager.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = pager.status().message();
  for (const char* part : {"--kv-pool 16", "--kv-sink 4", "--kv-tail 8", "at least 5 pages"}) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
  EXPECT_TRUE(Pager::Create(Config(20, PageSelect::kLru)).ok());
}

TEST(Pager, WhileTheContextFitsEveryPageIsReadAndNothingMoves) {
  auto pager = MakePager(Config(32, PageSelect::kQk));  // 8 pages
  for (int n = 1; n <= 8; ++n) {
    ASSERT_TRUE(pager->Prepare(0, Pages(10, n), (n - 1) * kPageTokens, n * kPageTokens).ok());
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(Attended(*pager, 0), all);
    EXPECT_TRUE(pager->pending().evicts.empty());
    EXPECT_FALSE(pager->WantsScores(0, n, true));
  }
  EXPECT_EQ(pager->pending().maps.size(), 8u);
}

// A long prefill then decode through an LRU pool: at every step the set holds the sink, the
// tail and the written pages, at most pool pages, and the rest are the most recent.
TEST(Pager, LruKeepsTheSinkTheTailAndTheMostRecentPages) {
  auto pager = MakePager(Config(24, PageSelect::kLru));  // 6 pages
  std::set<PageId> resident;
  int position = 0;
  for (int step = 0; step < 40; ++step) {
    const int want = step < 10 ? 10 : 1;  // chunks, then decode
    const int n = pager->MaxWrite(0, position, want);
    ASSERT_GE(n, 1);
    const int end = position + n;
    const std::vector<PageId> pages = Pages(100, (end + kPageTokens - 1) / kPageTokens);
    ASSERT_TRUE(pager->Prepare(0, pages, position, end).ok()) << "step " << step;
    for (PageId p : pager->pending().evicts) EXPECT_EQ(resident.erase(p), 1u);
    for (const PageFrame& m : pager->pending().maps) EXPECT_TRUE(resident.insert(m.page).second);
    pager->ClearPending(1);
    const std::vector<int32_t> attended = Attended(*pager, 0);
    EXPECT_LE(attended.size(), 6u);
    EXPECT_EQ(resident.size(), attended.size());
    EXPECT_EQ(attended.front(), 0) << "the sink";
    for (int p = std::max(0, position - 8) / kPageTokens; p <= (end - 1) / kPageTokens; ++p) {
      EXPECT_TRUE(std::binary_search(attended.begin(), attended.end(), p)) << "page " << p;
    }
    if (int(pages.size()) > 6) {
      // Past the sink, a contiguous run of the newest pages.
      EXPECT_EQ(attended.size(), 6u);
      for (size_t k = 2; k < attended.size(); ++k) EXPECT_EQ(attended[k], attended[k - 1] + 1);
      EXPECT_EQ(attended.back(), int(pages.size()) - 1);
    }
    position = end;
  }
  EXPECT_GT(pager->Stats().pages_evicted, 0u);
  EXPECT_EQ(pager->Stats().frames_used, 6);
}

TEST(Pager, QkReselectsTheBestScoredPagesFromTheTier) {
  auto pager = MakePager(Config(24, PageSelect::kQk));  // 6 pages: sink + tail 2-3 + rest
  const std::vector<PageId> pages = Pages(0, 20);
  // Prefill 20 pages through the pool.
  int position = 0;
  while (position < 79) {
    const int n = pager->MaxWrite(0, position, 79 - position);
    ASSERT_TRUE(pager
                    ->Prepare(0, std::span(pages).first(size_t((position + n + 3) / 4)), position,
                              position + n)
                    .ok());
    position += n;
  }
  EXPECT_TRUE(pager->WantsScores(0, 20, true));
  std::vector<float> scores(20, -5.0f);
  scores[7] = -0.5f;  // the page the query wants
  scores[3] = -1.0f;
  pager->SetScores(0, scores);
  pager->ClearPending(1);
  ASSERT_TRUE(pager->Prepare(0, pages, 79, 80).ok());
  const std::vector<int32_t> attended = Attended(*pager, 0);
  EXPECT_EQ(attended, (std::vector<int32_t>{0, 3, 7, 17, 18, 19}));
  // Pages 3 and 7 come back from the tier; two old ones leave.
  std::set<PageId> mapped;
  for (const PageFrame& m : pager->pending().maps) mapped.insert(m.page);
  EXPECT_EQ(mapped, (std::set<PageId>{3, 7}));
  EXPECT_EQ(pager->pending().evicts.size(), 2u);
  EXPECT_EQ(pager->Stats().reselects, 1u);
  // The next scoring comes reselect_tokens decode entries later.
  EXPECT_FALSE(pager->WantsScores(0, 20, false));
  EXPECT_FALSE(pager->WantsScores(0, 20, false));
  EXPECT_FALSE(pager->WantsScores(0, 20, false));
  EXPECT_TRUE(pager->WantsScores(0, 20, false));
}

// Slot 0 reaches a selection; its record, adopted by a sequence over the same pages in slot 1
// (whose last sequence left other pages resident) or in slot 0 again, gives the same choice.
TEST(Pager, ARecordedSelectionIsAdoptedTheSameInEverySlot) {
  for (PageSelect select : {PageSelect::kQk, PageSelect::kLru}) {
    SCOPED_TRACE(PageSelectName(select));
    auto pager = MakePager(Config(24, select));  // 6 pages
    const std::vector<PageId> pages = Pages(0, 20);
    pager->BeginSequence(0, nullptr, 0);
    for (int position = 0; position < 79;) {
      const int n = pager->MaxWrite(0, position, 79 - position);
      const size_t n_pages = size_t((position + n + 3) / 4);
      ASSERT_TRUE(pager->Prepare(0, std::span(pages).first(n_pages), position, position + n).ok());
      position += n;
    }
    std::vector<float> scores(20, -5.0f);
    scores[7] = -0.5f;
    scores[3] = -1.0f;
    if (select == PageSelect::kQk) pager->SetScores(0, scores);
    const PageSelection record = pager->Record(0, 19);  // the full pages
    ASSERT_EQ(record.n_pages(), 19);
    // Slot 1 held another sequence (pages 100..105) before.
    pager->BeginSequence(1, nullptr, 0);
    ASSERT_TRUE(pager->Prepare(1, Pages(100, 6), 0, 24).ok());
    std::vector<std::vector<int32_t>> chosen;
    for (int slot : {1, 0}) {
      pager->BeginSequence(slot, &record, 20);
      ASSERT_TRUE(pager->Prepare(slot, pages, 79, 80).ok());
      chosen.push_back(Attended(*pager, slot));
    }
    EXPECT_EQ(chosen[0], chosen[1]);
    if (select == PageSelect::kQk) {
      EXPECT_EQ(chosen[0], (std::vector<int32_t>{0, 3, 7, 17, 18, 19}));
    } else {
      EXPECT_EQ(chosen[0], (std::vector<int32_t>{0, 15, 16, 17, 18, 19}));
    }
    // Without a record the choice is by position: also the same in every slot.
    pager->BeginSequence(1, nullptr, 20);
    ASSERT_TRUE(pager->Prepare(1, pages, 79, 80).ok());
    EXPECT_EQ(Attended(*pager, 1), (std::vector<int32_t>{0, 15, 16, 17, 18, 19}));
  }
}

TEST(Pager, APrefixPinTakesTheWholePagesThePoolHasRoomFor) {
  auto pager = MakePager(Config(24, PageSelect::kLru));  // 6 pages, floor 5: room for 1
  using Ranges = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(pager->WithPrefixPin({}, 10), (Ranges{{0, 4}}));
  EXPECT_EQ(pager->WithPrefixPin({}, 3), (Ranges{{0, 3}}));
  EXPECT_EQ(pager->WithPrefixPin({}, 0), Ranges{});
  // Explicit pins come first: none is left for the prefix.
  EXPECT_EQ(pager->WithPrefixPin({{40, 44}}, 10), (Ranges{{40, 44}}));
  auto roomy = MakePager(Config(40, PageSelect::kLru));  // 10 pages: room for 5
  EXPECT_EQ(roomy->WithPrefixPin({{40, 44}}, 30), (Ranges{{40, 44}, {0, 16}}));
}

TEST(Pager, SharedPagesTakeOneFrameAndFreedPagesLeaveEverySet) {
  auto pager = MakePager(Config(20, PageSelect::kLru, 2));
  ASSERT_TRUE(pager->Prepare(0, Pages(0, 3), 0, 12).ok());
  std::vector<PageId> other = {0, 1, 50};  // shares pages 0 and 1 with slot 0
  ASSERT_TRUE(pager->Prepare(1, other, 8, 12).ok());
  EXPECT_EQ(pager->Stats().frames_used, 4);
  EXPECT_EQ(pager->pending().maps.size(), 4u);
  pager->ClearPending(1);
  pager->OnPageFreed(50);
  EXPECT_EQ(Attended(*pager, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pager->pending().frees, (std::vector<PageId>{50}));
  EXPECT_EQ(pager->Stats().frames_used, 3);
  // A page mapped and freed before the batch goes: neither the map nor an eviction remain.
  ASSERT_TRUE(pager->Prepare(1, std::vector<PageId>{0, 1, 60}, 8, 12).ok());
  pager->OnPageFreed(60);
  EXPECT_TRUE(pager->pending().maps.empty());
  pager->Reset();
  EXPECT_EQ(pager->pending().frees, Pages(0, 256));  // every page, in every stage
  EXPECT_EQ(pager->Stats().frames_used, 0);
  EXPECT_TRUE(Attended(*pager, 0).empty());
}

// An import into a freed page id: a free no batch carried yet is dropped (the stages' import
// forgets the page itself; the free arriving later would throw the imported bytes away); a
// free a batch carried makes the import wait for that batch.
TEST(Pager, AnImportDropsTheFreeNotYetSentAndWaitsForTheOneSent) {
  auto pager = MakePager(Config(20, PageSelect::kLru));
  ASSERT_TRUE(pager->Prepare(0, Pages(0, 3), 0, 12).ok());
  pager->ClearPending(1);
  pager->OnPageFreed(1);
  pager->OnPageFreed(2);
  pager->ClearPending(2);  // batch 2 carries both frees
  EXPECT_FALSE(pager->ReadyToImport(1, 1));
  EXPECT_TRUE(pager->ReadyToImport(1, 2));
  EXPECT_TRUE(pager->ReadyToImport(3, 0));  // never freed
  pager->OnPageFreed(0);
  EXPECT_EQ(pager->pending().frees, (std::vector<PageId>{0}));
  EXPECT_TRUE(pager->ReadyToImport(0, 0));  // its free was never sent: dropped
  EXPECT_TRUE(pager->pending().frees.empty());
  // After a failed batch every page is freed; the pages imported since are spared.
  pager->Reset();
  EXPECT_TRUE(pager->ReadyToImport(7, 2));
  std::vector<PageId> rest = Pages(0, 256);
  rest.erase(rest.begin() + 7);
  EXPECT_EQ(pager->pending().frees, rest);
}

TEST(Pager, AWriteIsCutToWhatThePoolLeavesBesideTheSinkAndTail) {
  auto pager = MakePager(Config(24, PageSelect::kLru));  // 6 pages
  EXPECT_EQ(pager->MaxWrite(0, 0, 24), 24);              // fits the pool: whole
  EXPECT_EQ(pager->MaxWrite(0, 0, 100), 24);
  // At 40: sink page 0, tail pages 8 and 9: the write may take pages 10, 11, 12.
  EXPECT_EQ(pager->MaxWrite(0, 40, 100), 12);
  // At 42 the tail straddles pages 8-10 and the write starts in page 10: pages 10-12.
  EXPECT_EQ(pager->MaxWrite(0, 42, 100), 10);
  EXPECT_EQ(pager->MaxWrite(0, 42, 3), 3);
  // Whatever a write takes, Prepare fits it.
  ASSERT_TRUE(pager->Prepare(0, Pages(0, 13), 42, 52).ok());
  EXPECT_LE(Attended(*pager, 0).size(), 6u);
}

TEST(Pager, PinnedPagesStayResidentAndLeaveLessRoomToWrite) {
  auto pager = MakePager(Config(32, PageSelect::kLru));                        // 8 pages
  const std::vector<std::pair<int32_t, int32_t>> pins = {{20, 30}, {44, 48}};  // pages 5-7, 11
  EXPECT_EQ(pager->PinnedPages(pins), 4);
  pager->SetPins(0, pins);
  EXPECT_EQ(pager->Stats().pinned_pages, 4);
  // At 64: sink 0, tail 14-15, pins 5, 6, 7, 11: one page left to write.
  EXPECT_EQ(pager->MaxWrite(0, 64, 100), 4);
  int position = 0;
  for (int step = 0; step < 30; ++step) {
    const int n = pager->MaxWrite(0, position, step < 12 ? 9 : 1);
    const int end = position + n;
    const std::vector<PageId> pages = Pages(0, (end + kPageTokens - 1) / kPageTokens);
    ASSERT_TRUE(pager->Prepare(0, pages, position, end).ok()) << "step " << step;
    pager->ClearPending(1);
    const std::vector<int32_t> attended = Attended(*pager, 0);
    EXPECT_LE(attended.size(), 8u);
    for (int p : {5, 6, 7, 11}) {
      if (p < int(pages.size())) {
        EXPECT_TRUE(std::binary_search(attended.begin(), attended.end(), p)) << "page " << p;
      }
    }
    position = end;
  }
  pager->SetPins(0, {});
  EXPECT_EQ(pager->Stats().pinned_pages, 0);
}

}  // namespace pager_test
}  // namespace shardlm
