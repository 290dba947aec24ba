// PageResidency: a stage applies the pager's moves bit-exactly (frames ↔ tier), skips
// writing clean pages back, copies and exports from wherever a page is, and refuses ops that
// name pages or frames outside its pool; a tier that fails (a truncated file) loses only the
// pages it moved, which are reported and never exported.
#include "kv/page_residency.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pool_config.h"

namespace shardlm {
namespace page_residency_test {

constexpr int kPages = 16;
constexpr int kFrames = 3;

struct Stage {
  std::unique_ptr<PagePool> frames;
  std::unique_ptr<PageResidency> residency;
  PagingLoss loss;  // what the tier failed to move
  explicit Stage(const KvTierSpec& spec = KvTierSpec()) {
    frames = std::move(PagePool::Create(kv_test::PoolConfig(kFrames, 4, 2, 2, 32, KvType::kF16)))
                 .value();
    auto tier = std::move(CreateKvTier(spec, kPages, frames->page_bytes(), "t")).value();
    residency = std::move(PageResidency::Create(
                              frames.get(), kPages, std::move(tier),
                              std::move(KeySummaries::Create(frames->config(), kPages)).value()))
                    .value();
  }
  Status Apply(const PagingOps& ops) { return residency->Apply(ops, &loss); }
  Status Copy(PageId src, PageId dst) { return residency->Copy(src, dst, &loss); }
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
  ASSERT_TRUE(s.Apply(Maps({{5, 0}, {9, 1}})).ok());
  s.Fill(5, 50);
  s.Fill(9, 90);
  // Page 11 takes the frame page 5 left.
  ASSERT_TRUE(s.Apply(Ops({5}, {{11, 0}})).ok());
  EXPECT_EQ(s.residency->frame_of(5), kNoPage);
  EXPECT_EQ(s.residency->frame_of(11), 0);
  s.Fill(11, 110);
  EXPECT_EQ(s.Bytes(5), Expected(s, 50));  // from the tier
  ASSERT_TRUE(s.Apply(Ops({11}, {{5, 2}})).ok());
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
  ASSERT_TRUE(s.Apply(Maps({{3, 0}})).ok());
  s.Fill(3, 30);
  ASSERT_TRUE(s.Apply(Ops({3})).ok());
  ASSERT_TRUE(s.Apply(Maps({{3, 1}})).ok());  // read back, not written
  ASSERT_TRUE(s.Apply(Ops({3})).ok());
  EXPECT_EQ(s.residency->Stats().page_outs, 1u);
  EXPECT_EQ(s.Bytes(3), Expected(s, 30));
  ASSERT_TRUE(s.Apply(Ops({}, {}, {3})).ok());
  EXPECT_FALSE(s.residency->tier().Holds(3));
  // A page id used again starts empty: mapping it reads nothing.
  ASSERT_TRUE(s.Apply(Maps({{3, 2}})).ok());
  EXPECT_EQ(s.residency->Stats().page_ins, 1u);
}

TEST(PageResidency, CopyOnWriteReadsTheSourceFromTheTierAndImportsLandThere) {
  Stage s;
  ASSERT_TRUE(s.Apply(Maps({{1, 0}})).ok());
  s.Fill(1, 10);
  ASSERT_TRUE(s.Apply(Ops({1}, {{2, 0}})).ok());
  ASSERT_TRUE(s.Copy(1, 2).ok());
  EXPECT_EQ(s.Bytes(2), Expected(s, 10));
  const std::vector<uint8_t> page = Expected(s, 77);
  const PageId imported = 12;
  ASSERT_TRUE(s.residency->Import(std::span<const PageId>(&imported, 1), page.data()).ok());
  EXPECT_TRUE(s.residency->tier().Holds(12));
  EXPECT_EQ(s.Bytes(12), page);
  EXPECT_EQ(s.residency->summaries()->summarized(12, 1, 1), 4);
}

// The pager sends no free for a page it imports into (the import must not wait for the next
// batch): whatever the stage still held for that page id, frame or tier copy, is forgotten.
TEST(PageResidency, AnImportForgetsWhatThePageHeldBefore) {
  Stage s;
  ASSERT_TRUE(s.Apply(Maps({{1, 0}, {2, 1}})).ok());
  s.Fill(1, 10);
  s.Fill(2, 20);
  ASSERT_TRUE(s.Apply(Ops({2})).ok());  // page 2 to the tier
  const std::vector<uint8_t> page = Expected(s, 77);
  for (PageId imported : {1, 2}) {
    ASSERT_TRUE(s.residency->Import(std::span<const PageId>(&imported, 1), page.data()).ok());
    EXPECT_EQ(s.residency->frame_of(imported), kNoPage);
    EXPECT_EQ(s.Bytes(imported), page);
  }
  // Frame 0 is free again: the next batch may map another page there.
  ASSERT_TRUE(s.Apply(Maps({{5, 0}})).ok());
  ASSERT_TRUE(s.Apply(Ops({5}, {{1, 0}})).ok());
  EXPECT_EQ(s.Bytes(1), page);
  EXPECT_EQ(s.residency->summaries()->summarized(1, 1, 1), 4);
}

TEST(PageResidency, FramesListTheAttendedPagesOnly) {
  Stage s;
  ASSERT_TRUE(s.Apply(Maps({{4, 2}, {6, 0}})).ok());
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
  EXPECT_EQ(s.Apply(Maps({{kPages, 0}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(Maps({{1, kFrames}})).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Apply(Maps({{1, 0}})).ok());
  EXPECT_EQ(s.Apply(Maps({{2, 0}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(Ops({7})).code(), StatusCode::kInvalidArgument);
  std::vector<PageId> every(kPages);
  std::iota(every.begin(), every.end(), 0);
  ASSERT_TRUE(s.Apply(Ops({}, {}, every)).ok());
  EXPECT_EQ(s.residency->frame_of(1), kNoPage);
  EXPECT_EQ(s.residency->Stats().resident_pages, 0);
}

TEST(PageResidency, ATruncatedTierFileLosesOnlyThePagesReadFromIt) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("page_residency_loss_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  KvTierSpec spec;
  spec.kind = KvTierSpec::Kind::kFile;
  spec.dir = dir.string();
  {
    Stage s(spec);
    ASSERT_TRUE(s.Apply(Maps({{1, 0}, {2, 1}})).ok());
    s.Fill(1, 11);
    s.Fill(2, 22);
    ASSERT_TRUE(s.Apply(Ops({1, 2})).ok());  // both go to the file
    ASSERT_TRUE(s.loss.empty());
    std::filesystem::path file;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) file = entry.path();
    std::filesystem::resize_file(file, 0);
    // Page 1 comes back from nothing: lost, reported with the file's error; page 3 is new.
    ASSERT_TRUE(s.Apply(Maps({{1, 0}, {3, 1}})).ok());
    ASSERT_EQ(s.loss.pages, (std::vector<PageId>{1}));
    EXPECT_NE(s.loss.error.message().find(file.filename().string()), std::string::npos)
        << s.loss.error.message();
    EXPECT_EQ(s.residency->frame_of(1), 0);  // the frames are as the ops said
    std::vector<uint8_t> out(s.frames->page_bytes());
    const PageId lost = 1;
    EXPECT_FALSE(s.residency->Export(std::span<const PageId>(&lost, 1), out.data()).ok());
    // A copy from the lost page loses its copy too.
    s.loss.clear();
    ASSERT_TRUE(s.Copy(1, 3).ok());
    EXPECT_EQ(s.loss.pages, (std::vector<PageId>{3}));
    // Freed, the page is whole again when next written.
    ASSERT_TRUE(s.Apply(Ops({}, {}, {1, 3})).ok());
    s.loss.clear();
    ASSERT_TRUE(s.Apply(Maps({{1, 0}})).ok());
    s.Fill(1, 33);
    EXPECT_TRUE(s.loss.empty());
    EXPECT_EQ(s.Bytes(1), Expected(s, 33));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace page_residency_test
}  // namespace shardlm
