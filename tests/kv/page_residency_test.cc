// PageResidency: a stage applies the pager's moves bit-exactly (frames ↔ tier), skips
// writing clean pages back, copies and exports from wherever a page is, and refuses ops that
// name pages or frames outside its pool.
#include "kv/page_residency.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace shardlm {
namespace page_residency_test {

constexpr int kPages = 16;
constexpr int kFrames = 3;

struct Stage {
  std::unique_ptr<PagePool> frames;
  std::unique_ptr<PageResidency> residency;
  Stage() {
    PagePoolConfig c;
    c.n_pages = kFrames;
    c.page_tokens = 4;
    c.n_layers = 2;
    c.n_kv_heads = 2;
    c.head_dim = 32;
    c.kv_type = KvType::kF16;
    frames = std::move(PagePool::Create(c)).value();
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

PagingOps Maps(std::initializer_list<PageFrame> maps) {
  PagingOps ops;
  ops.maps = maps;
  return ops;
}

TEST(PageResidency, PagesMoveOutAndBackBitExact) {
  Stage s;
  ASSERT_TRUE(s.residency->Apply(Maps({{5, 0}, {9, 1}})).ok());
  s.Fill(5, 50);
  s.Fill(9, 90);
  PagingOps out;
  out.evicts = {5};
  out.maps = {{11, 0}};  // page 11 takes the frame page 5 left
  ASSERT_TRUE(s.residency->Apply(out).ok());
  EXPECT_EQ(s.residency->frame_of(5), kNoPage);
  EXPECT_EQ(s.residency->frame_of(11), 0);
  s.Fill(11, 110);
  EXPECT_EQ(s.Bytes(5), Expected(s, 50));  // from the tier
  PagingOps back;
  back.evicts = {11};
  back.maps = {{5, 2}};
  ASSERT_TRUE(s.residency->Apply(back).ok());
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
  PagingOps evict;
  evict.evicts = {3};
  ASSERT_TRUE(s.residency->Apply(evict).ok());
  ASSERT_TRUE(s.residency->Apply(Maps({{3, 1}})).ok());  // read back, not written
  ASSERT_TRUE(s.residency->Apply(evict).ok());
  EXPECT_EQ(s.residency->Stats().page_outs, 1u);
  EXPECT_EQ(s.Bytes(3), Expected(s, 30));
  PagingOps free;
  free.frees = {3};
  ASSERT_TRUE(s.residency->Apply(free).ok());
  EXPECT_FALSE(s.residency->tier().Holds(3));
  // A page id used again starts empty: mapping it reads nothing.
  ASSERT_TRUE(s.residency->Apply(Maps({{3, 2}})).ok());
  EXPECT_EQ(s.residency->Stats().page_ins, 1u);
}

TEST(PageResidency, CopyOnWriteReadsTheSourceFromTheTierAndImportsLandThere) {
  Stage s;
  ASSERT_TRUE(s.residency->Apply(Maps({{1, 0}})).ok());
  s.Fill(1, 10);
  PagingOps ops;
  ops.evicts = {1};
  ops.maps = {{2, 0}};
  ASSERT_TRUE(s.residency->Apply(ops).ok());
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
  PagingOps evict;
  evict.evicts = {7};
  EXPECT_EQ(s.residency->Apply(evict).code(), StatusCode::kInvalidArgument);
  PagingOps reset;
  reset.reset = true;
  ASSERT_TRUE(s.residency->Apply(reset).ok());
  EXPECT_EQ(s.residency->frame_of(1), kNoPage);
  EXPECT_EQ(s.residency->Stats().resident_pages, 0);
}

}  // namespace page_residency_test
}  // namespace shardlm
