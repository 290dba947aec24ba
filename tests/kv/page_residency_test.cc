// PageResidency: a stage applies the pager's moves bit-exactly (frames ↔ tier), skips
// writing clean pages back, copies and exports from wherever a page is, and refuses ops that
// name pages or frames outside its pool.
#include "kv/page_residency.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "pool_config.h"

namespace shardlm {
namespace page_residency_test {

constexpr int kPages = 16;
constexpr int kFrames = 3;

struct Stage {
  std::unique_ptr<PagePool> frames;
  std::unique_ptr<PageResidency> residency;
  Stage() {
    frames = std::move(PagePool::Create(kv_test::PoolConfig(kFrames, 4, 2, 2, 32, KvType::kF16)))
                 .value();
    auto tier = std::move(CreateKvTier(KvTierSpec(), kPages, frames->page_bytes(), "t")).value();
    residency =
        std::move(PageResidency::Create(frames.get(), kPages, std::move(tier), true)).value();
  }
  // Fills page's frame with bytes made from `seed` (what a forward pass would write).
  void Fill(PageId page, uint32_t seed) {
    std::mt19937 rng(seed);
    uint8_t* bytes = frames->page_data(residency->frame_of(page));
    for (size_t i = 0; i < frames->page_bytes(); ++i) bytes[i] = uint8_t(rng() & 0x3f);
    residency->MarkWritten(page);
  }
  std::vector<uint8_t> Bytes(PageId page) {
    std::vector<uint8_t> out(frames->page_bytes());
    EXPECT_TRUE(residency->Export(std::span<const PageId>(&page, 1), out.data()).ok());
    return out;
  }
};

std::vector<uint8_t> Expected(const Stage& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(s.frames->page_bytes());
  for (uint8_t& b : out) b = uint8_t(rng() & 0x3f);
  return out;
}

// The ops of one batch: evictions, maps and frees (applied frees, evictions, maps).
PagingOps Ops(std::vector<PageId> evicts, std::vector<PageFrame> maps = {},
              std::vector<PageId> frees = {}) {
  PagingOps ops;
  ops.evicts = std::move(evicts);
  ops.maps = std::move(maps);
  ops.frees = std::move(frees);
  return ops;
}
PagingOps Maps(std::vector<PageFrame> maps) { return Ops({}, std::move(maps)); }

TEST(PageResidency, PagesMoveOutAndBackBitExact) {
  Stage s;
  ASSERT_TRUE(s.residency->Apply(Maps({{5, 0}, {9, 1}})).ok());
  s.Fill(5, 50);
  s.Fill(9, 90);
  // Page 11 takes the frame page 5 left.
  ASSERT_TRUE(s.residency->Apply(Ops({5}, {{11, 0}})).ok());
  EXPECT_EQ(s.residency->frame_of(5), kNoPage);
  EXPECT_EQ(s.residency->frame_of(11), 0);
  s.Fill(11, 110);
  EXPECT_EQ(s.Bytes(5), Expected(s, 50));  // from the tier
  ASSERT_TRUE(s.residency->Apply(Ops({11}, {{5, 2}})).ok());
  EXPECT_EQ(s.residency->frame_of(5), 2);
  EXPECT_EQ(s.Bytes(5), Expected(s, 50));
  EXPECT_EQ(s.Bytes(11), Expected(s, 110));
  EXPECT_EQ(s.Bytes(9), Expected(s, 90));
  const ResidencyStats stats = s.residency->Stats();
  EXPECT_EQ(stats.resident_pages, 2);
  EXPECT_EQ(stats.tier_pages, 2);
  EXPECT_EQ(stats.page_outs, 2u);
  EXPECT_EQ(stats.page_ins, 1u);
}

TEST(PageResidency, ACleanPageIsNotWrittenBackAndAFreedPageIsForgotten) {
  Stage s;
  ASSERT_TRUE(s.residency->Apply(Maps({{3, 0}})).ok());
  s.Fill(3, 30);
  ASSERT_TRUE(s.residency->Apply(Ops({3})).ok());
  ASSERT_TRUE(s.residency->Apply(Maps({{3, 1}})).ok());  // read back, not written
  ASSERT_TRUE(s.residency->Apply(Ops({3})).ok());
  EXPECT_EQ(s.residency->Stats().page_outs, 1u);
  EXPECT_EQ(s.Bytes(3), Expected(s, 30));
  ASSERT_TRUE(s.residency->Apply(Ops({}, {}, {3})).ok());
  EXPECT_FALSE(s.residency->tier().Holds(3));
  // A page id used again starts empty: mapping it reads nothing.
  ASSERT_TRUE(s.residency->Apply(Maps({{3, 2}})).ok());
  EXPECT_EQ(s.residency->Stats().page_ins, 1u);
}

TEST(PageResidency, CopyOnWriteReadsTheSourceFromTheTierAndImportsLandThere) {
  Stage s;
  ASSERT_TRUE(s.residency->Apply(Maps({{1, 0}})).ok());
  s.Fill(1, 10);
  ASSERT_TRUE(s.residency->Apply(Ops({1}, {{2, 0}})).ok());
  ASSERT_TRUE(s.residency->Copy(1, 2).ok());
  EXPECT_EQ(s.Bytes(2), Expected(s, 10));
  const std::vector<uint8_t> page = Expected(s, 77);
  const PageId imported = 12;
  ASSERT_TRUE(s.residency->Import(std::span<const PageId>(&imported, 1), page.data()).ok());
  EXPECT_TRUE(s.residency->tier().Holds(12));
  EXPECT_EQ(s.Bytes(12), page);
  EXPECT_EQ(s.residency->summaries()->summarized(12, 1, 1), 4);
}

TEST(PageResidency, FramesListTheAttendedPagesOnly) {
  Stage s;
  ASSERT_TRUE(s.residency->Apply(Maps({{4, 2}, {6, 0}})).ok());
  const std::vector<PageId> pages = {4, 5, 6};
  std::vector<PageId> frames;
  const std::vector<int32_t> attended = {0, 2};
  ASSERT_TRUE(s.residency->Frames(pages, attended, &frames).ok());
  EXPECT_EQ(frames, (std::vector<PageId>{2, kNoPage, 0}));
  // Every page (no list): page 5 is not resident.
  EXPECT_EQ(s.residency->Frames(pages, {}, &frames).code(), StatusCode::kInvalidArgument);
}

TEST(PageResidency, BadOpsAreRefusedBeforeAnythingMoves) {
  Stage s;
  EXPECT_EQ(s.residency->Apply(Maps({{kPages, 0}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.residency->Apply(Maps({{1, kFrames}})).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.residency->Apply(Maps({{1, 0}})).ok());
  EXPECT_EQ(s.residency->Apply(Maps({{2, 0}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.residency->Apply(Ops({7})).code(), StatusCode::kInvalidArgument);
  PagingOps reset;
  reset.reset = true;
  ASSERT_TRUE(s.residency->Apply(reset).ok());
  EXPECT_EQ(s.residency->frame_of(1), kNoPage);
  EXPECT_EQ(s.residency->Stats().resident_pages, 0);
}

}  // namespace page_residency_test
}  // namespace shardlm
