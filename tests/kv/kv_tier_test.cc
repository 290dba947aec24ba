// KvTier: pages go out and come back bit-exact from RAM and from a file, also once the file
// was deleted; a page the tier does not hold, a truncated file and a full disk are errors
// that name the page.
#include "kv/kv_tier.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <vector>

#include "../support/temp_dir.h"

namespace shardlm {
namespace kv_tier_test {

using testing_util::TempDir;

constexpr size_t kPageBytes = 4096 + 24;  // not a multiple of the file system's blocks

std::vector<uint8_t> RandomPage(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> page(kPageBytes);
  for (uint8_t& b : page) b = uint8_t(rng());
  return page;
}

std::unique_ptr<KvTier> MakeTier(const KvTierSpec& spec, int n_pages) {
  auto tier = CreateKvTier(spec, n_pages, kPageBytes, "test");
  EXPECT_TRUE(tier.ok()) << tier.status().message();
  return std::move(tier).value();
}

KvTierSpec FileSpec(const TempDir& dir) {
  KvTierSpec spec;
  spec.kind = KvTierSpec::Kind::kFile;
  spec.dir = dir.path().string();
  return spec;
}

void ExpectRoundTrips(KvTier& tier) {
  EXPECT_FALSE(tier.Holds(3));
  std::vector<uint8_t> back(kPageBytes);
  EXPECT_EQ(tier.Read(3, back.data()).code(), StatusCode::kNotFound);
  for (PageId page : {0, 3, 7}) ASSERT_TRUE(tier.Write(page, RandomPage(page).data()).ok());
  EXPECT_EQ(tier.pages_stored(), 3);
  ASSERT_TRUE(tier.Write(3, RandomPage(33).data()).ok());  // replaced, still one page
  EXPECT_EQ(tier.pages_stored(), 3);
  for (auto [page, seed] : {std::pair{0, 0u}, {3, 33u}, {7, 7u}}) {
    ASSERT_TRUE(tier.Read(page, back.data()).ok());
    EXPECT_EQ(back, RandomPage(seed)) << "page " << page;
  }
  tier.Drop(3);
  EXPECT_FALSE(tier.Holds(3));
  EXPECT_EQ(tier.pages_stored(), 2);
  EXPECT_EQ(tier.Read(3, back.data()).code(), StatusCode::kNotFound);
  ASSERT_TRUE(tier.Read(7, back.data()).ok());
  EXPECT_EQ(back, RandomPage(7));
}

TEST(KvTier, ParsesItsFlag) {
  EXPECT_EQ(ParseKvTierSpec("ram")->kind, KvTierSpec::Kind::kRam);
  Result<KvTierSpec> file = ParseKvTierSpec("file:/var/tmp/kv");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->kind, KvTierSpec::Kind::kFile);
  EXPECT_EQ(file->dir, "/var/tmp/kv");
  EXPECT_EQ(KvTierSpecName(*file), "file:/var/tmp/kv");
  for (const char* bad : {"", "file:", "disk", "RAM"}) {
    EXPECT_EQ(ParseKvTierSpec(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(KvTier, RamPagesRoundTripBitExact) {
  auto tier = MakeTier(KvTierSpec(), 8);
  ExpectRoundTrips(*tier);
}

TEST(KvTier, FilePagesRoundTripBitExactAndTheFileGoesWithTheTier) {
  TempDir dir("kv_tier");
  {
    auto tier = MakeTier(FileSpec(dir), 8);
    ExpectRoundTrips(*tier);
    EXPECT_TRUE(std::filesystem::exists(tier->where()));
    EXPECT_EQ(std::filesystem::status(tier->where()).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(KvTier, AMissingFolderIsAnErrorNamingIt) {
  KvTierSpec spec;
  spec.kind = KvTierSpec::Kind::kFile;
  spec.dir = "/nonexistent/shardlm-kv-tier";
  Result<std::unique_ptr<KvTier>> tier = CreateKvTier(spec, 4, kPageBytes, "test");
  EXPECT_EQ(tier.status().code(), StatusCode::kIoError);
  EXPECT_NE(tier.status().message().find("/nonexistent/shardlm-kv-tier"), std::string::npos);
}

TEST(KvTier, ATruncatedFileFailsTheReadNamingTheFileAndPage) {
  TempDir dir("kv_tier");
  auto tier = MakeTier(FileSpec(dir), 8);
  ASSERT_TRUE(tier->Write(5, RandomPage(5).data()).ok());
  std::filesystem::resize_file(tier->where(), kPageBytes * 5 + 100);
  std::vector<uint8_t> back(kPageBytes);
  Status status = tier->Read(5, back.data());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("page 5"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(tier->where()), std::string::npos) << status.message();
}

// Deleted under a running server (someone cleans the folder): the open file keeps its pages,
// so nothing fails; the tier's own removal at the end finds nothing to remove.
TEST(KvTier, ADeletedFileKeepsServingItsPages) {
  TempDir dir("kv_tier");
  {
    auto tier = MakeTier(FileSpec(dir), 8);
    ASSERT_TRUE(tier->Write(4, RandomPage(4).data()).ok());
    ASSERT_TRUE(std::filesystem::remove(tier->where()));
    ASSERT_TRUE(tier->Write(1, RandomPage(1).data()).ok());
    std::vector<uint8_t> back(kPageBytes);
    for (PageId page : {4, 1}) {
      ASSERT_TRUE(tier->Read(page, back.data()).ok());
      EXPECT_EQ(back, RandomPage(uint32_t(page)));
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Truncated, then grown again by a later write: the lost page reads as zeros from the hole,
// which only its checksum can tell.
TEST(KvTier, APageLostInAHoleIsAnErrorNotZeros) {
  TempDir dir("kv_tier");
  auto tier = MakeTier(FileSpec(dir), 8);
  ASSERT_TRUE(tier->Write(2, RandomPage(2).data()).ok());
  std::filesystem::resize_file(tier->where(), 0);
  ASSERT_TRUE(tier->Write(6, RandomPage(6).data()).ok());
  std::vector<uint8_t> back(kPageBytes);
  Status status = tier->Read(2, back.data());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("page 2"), std::string::npos) << status.message();
  ASSERT_TRUE(tier->Read(6, back.data()).ok());
  EXPECT_EQ(back, RandomPage(6));
}

TEST(KvTier, AFullDiskFailsTheWriteAndTheTierForgetsThePage) {
  TempDir dir("kv_tier");
  auto tier = MakeTier(FileSpec(dir), 64);
  // The file may not grow past 2 pages: the third write fails as on a full disk.
  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = kPageBytes * 2;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_TRUE(tier->Write(0, RandomPage(0).data()).ok());
  ASSERT_TRUE(tier->Write(1, RandomPage(1).data()).ok());
  Status full = tier->Write(40, RandomPage(40).data());
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.message();
  EXPECT_NE(full.message().find("page 40"), std::string::npos) << full.message();
  EXPECT_FALSE(tier->Holds(40));
  std::vector<uint8_t> back(kPageBytes);
  ASSERT_TRUE(tier->Read(1, back.data()).ok());
  EXPECT_EQ(back, RandomPage(1));
}

}  // namespace kv_tier_test
}  // namespace shardlm
