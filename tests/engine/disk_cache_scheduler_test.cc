// The disk tier of the scheduler's prefix cache on the fixture models: a scheduler persists
// full pages into a folder; a new scheduler on the same folder (a restarted server) serves
// a prompt sharing that prefix from disk — usage and counters say so — and gives bitwise
// the tokens and logprobs of a cold scheduler. The same through a local + remote split, with
// the shard daemon restarted too. A byte-flipped, truncated or foreign file, and a file
// missing one stage's section, are discarded (counted, logged) and the prompt is computed,
// with the cold output; every damaged file of a chain is written again, whole, by the
// request that recomputes it (not only the first, where the load stopped). A tiny budget evicts
// files and a tiny pool evicts pages waiting for export; serving stays correct.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/snapshot_file.h"
#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "support/file_bytes.h"

namespace shardlm {
namespace disk_cache_scheduler_test {

namespace fs = std::filesystem;
using scheduler_test_util::Collector;
using scheduler_test_util::Encode;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::kGemma4;
using scheduler_test_util::kLongText;
using scheduler_test_util::kPageTokens;
using scheduler_test_util::kQwen;
using scheduler_test_util::kQwen35;
using scheduler_test_util::kStories;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunOne;
using scheduler_test_util::ServiceThread;
using scheduler_test_util::StoryTokens;
using scheduler_test_util::WithRemoteStage;

// A fresh folder per test case.
fs::path TempDir(const std::string& name) {
  return testing_util::FreshDir("shardlm_disk_cache", name);
}

SchedulerOptions Options(const fs::path& dir, int n_ctx = 256) {
  SchedulerOptions options = scheduler_test_util::TestOptions(2, n_ctx);
  options.prefix_cache = !dir.empty();
  options.kv_cache_dir = dir.string();
  return options;
}

// Turn 1 writes 70 prompt tokens + 3 fed replies: 4 full pages. Turn 2 shares 53 tokens
// with it: 3 full pages.
std::vector<TokenId> Turn1(const std::string& file) { return StoryTokens(file, 70, kLongText); }
std::vector<TokenId> Turn2(const std::string& file) {
  std::vector<TokenId> prompt = Turn1(file);
  prompt.resize(53);
  const std::vector<TokenId> more =
      Encode(file, " The cat sat on the mat and looked at it.", false);
  prompt.insert(prompt.end(), more.begin(), more.end());
  return prompt;
}
constexpr int kTurn2Cached = 3 * kPageTokens;

// The cold answer to turn 2 (no cache at all).
std::unique_ptr<Collector> ColdTurn2(const std::string& file, uint64_t seed) {
  auto cold = MakeScheduler(file, Options(fs::path()));
  if (!cold) return nullptr;
  return RunOne(*cold, Request(Turn2(file), 12, seed));
}

// Runs turn 1 on a scheduler over `options`, then destroys it (which writes every page).
void PersistTurn1(const std::string& file, const SchedulerOptions& options) {
  auto warm = MakeScheduler(file, options);
  ASSERT_TRUE(warm);
  auto reply = RunOne(*warm, Request(Turn1(file), 4));
  EXPECT_EQ(reply->finish.usage.cached_tokens, 0);
}

std::vector<fs::path> SnapshotFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".snap") {
      files.push_back(entry.path());
    }
  }
  return files;
}

TEST(DiskCacheSchedulerTest, RestartedSchedulerHitsDiskAndIsBitwiseCold) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    for (uint64_t seed : {0, 7}) {
      SCOPED_TRACE(fmt::format("{} seed {}", file, seed));
      const fs::path dir = TempDir("restart");
      auto want = ColdTurn2(file, seed);
      ASSERT_TRUE(want);
      PersistTurn1(file, Options(dir));
      EXPECT_EQ(SnapshotFiles(dir).size(), 4u);

      auto restarted = MakeScheduler(file, Options(dir));
      ASSERT_TRUE(restarted);
      EXPECT_EQ(restarted->Stats().kv_disk_files, 4);
      // An unrelated prompt first: the pages the load gets have held other KV (a fresh
      // pool, like the last scheduler's freed memory, could hold the right bytes by chance).
      const std::vector<TokenId> other = StoryTokens(file, 70, "A big bird sang in the rain.");
      (void)RunOne(*restarted, Request(other, 4));
      EngineStats stats = restarted->Stats();
      EXPECT_EQ(stats.prompt_tokens_cached, 0);
      const int64_t computed_before = stats.prompt_tokens_computed;
      auto got = RunOne(*restarted, Request(Turn2(file), 12, seed));
      EXPECT_EQ(got->finish.usage.cached_tokens, kTurn2Cached);
      EXPECT_EQ(got->finish.usage.cached_disk_tokens, kTurn2Cached);
      ExpectSameOutput(*got, *want);
      stats = restarted->Stats();
      EXPECT_EQ(stats.prompt_tokens_disk, kTurn2Cached);
      EXPECT_EQ(stats.prompt_tokens_memory, 0);
      EXPECT_EQ(stats.prompt_tokens_cached, kTurn2Cached);
      EXPECT_EQ(stats.prompt_tokens_computed - computed_before,
                int64_t(Turn2(file).size()) - kTurn2Cached);
      EXPECT_GT(stats.kv_disk_bytes_read, 0);
      EXPECT_EQ(stats.kv_disk_corrupt_files, 0);

      // The loaded pages (and those turn 2 filled) are in memory now: the same prompt hits
      // memory only, every full page but the one holding its last token.
      auto again = RunOne(*restarted, Request(Turn2(file), 12, seed));
      const int n_prompt = int(Turn2(file).size());
      EXPECT_EQ(again->finish.usage.cached_tokens, (n_prompt - 1) / kPageTokens * kPageTokens);
      EXPECT_EQ(again->finish.usage.cached_disk_tokens, 0);
      ExpectSameOutput(*again, *want);
      stats = restarted->Stats();
      EXPECT_EQ(stats.prompt_tokens_memory, again->finish.usage.cached_tokens);
      EXPECT_EQ(stats.prompt_tokens_disk, kTurn2Cached);
    }
  }
}

// On qwen35 too: its recurrent state after the last whole page is on disk beside the page;
// and on gemma3 and gemma4, whose windows (in rings) are such a state beside the pages of
// their global layers.
TEST(DiskCacheSchedulerTest, MultiTurnConversationComputesOnlyPastTheLastPageBoundary) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kQwen, kQwen35, "gemma3-tiny.gguf", kGemma4}) {
    SCOPED_TRACE(file);
    const fs::path dir = TempDir(std::string("multiturn_") + file);
    auto cold = MakeScheduler(file, Options(fs::path()));
    ASSERT_TRUE(cold);
    std::vector<TokenId> conversation = StoryTokens(file, 37, kLongText);
    int expect_cached = 0;
    for (int turn = 0; turn < 3; ++turn) {
      SCOPED_TRACE(turn);
      // A new scheduler every turn: a server restarted between turns.
      auto warm = MakeScheduler(file, Options(dir));
      ASSERT_TRUE(warm);
      auto got = RunOne(*warm, Request(conversation, 20));
      auto want = RunOne(*cold, Request(conversation, 20));
      ExpectSameOutput(*got, *want);
      EXPECT_EQ(got->finish.usage.cached_tokens, expect_cached);
      EXPECT_EQ(got->finish.usage.cached_disk_tokens, expect_cached);
      EXPECT_EQ(warm->Stats().prompt_tokens_computed, int64_t(conversation.size()) - expect_cached);
      // This turn wrote its prompt and every reply token but the last (never fed): the next
      // turn finds every full page of that.
      const int written = int(conversation.size()) + int(got->ids.size()) - 1;
      expect_cached = written / kPageTokens * kPageTokens;
      conversation.insert(conversation.end(), got->ids.begin(), got->ids.end());
      const std::vector<TokenId> next = Encode(file, " Then they went home.", false);
      conversation.insert(conversation.end(), next.begin(), next.end());
    }
  }
}

// Turn 2 edits turn 1 after 53 tokens: its first 3 pages resume from pages alone, so gemma4's
// windows are kept in pages here (in rings, a window state is kept only where a prompt or a
// sequence ended; the multi-turn test above resumes those).
TEST(DiskCacheSchedulerTest, LocalPlusRemoteSplitRestoresAfterTheDaemonRestarts) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen, kGemma4}) {
    SCOPED_TRACE(file);
    const fs::path dir = TempDir("split");
    const std::string socket = (dir / "stage1.sock").string();
    SchedulerOptions options = WithRemoteStage(Options(dir), socket);
    options.window_kv = WindowKv::kFull;
    auto want = ColdTurn2(file, 0);
    ASSERT_TRUE(want);
    {
      ServiceThread daemon(socket);
      ASSERT_TRUE(daemon.ok());
      PersistTurn1(file, options);
    }
    EXPECT_EQ(SnapshotFiles(dir).size(), 4u);
    ServiceThread restarted_daemon(socket);
    ASSERT_TRUE(restarted_daemon.ok());
    auto restarted = MakeScheduler(file, options);
    ASSERT_TRUE(restarted);
    auto got = RunOne(*restarted, Request(Turn2(file), 12));
    EXPECT_EQ(got->finish.usage.cached_disk_tokens, kTurn2Cached);
    ExpectSameOutput(*got, *want);
    EXPECT_EQ(restarted->Stats().prompt_tokens_disk, kTurn2Cached);
  }
}

// Damages every snapshot file with `damage`, then expects a restarted scheduler to give the
// cold answer with nothing (or less) from disk, a corrupt-file count and a log line.
template <typename Damage>
void DamagedFilesCase(const std::string& file, const std::string& name, Damage damage) {
  SCOPED_TRACE(name);
  const fs::path dir = TempDir(name);
  auto want = ColdTurn2(file, 0);
  ASSERT_TRUE(want);
  PersistTurn1(file, Options(dir));
  const std::vector<fs::path> files = SnapshotFiles(dir);
  ASSERT_EQ(files.size(), 4u);
  for (const fs::path& path : files) damage(path);
  ::testing::internal::CaptureStderr();
  auto restarted = MakeScheduler(file, Options(dir));
  std::unique_ptr<Collector> got;
  if (restarted) got = RunOne(*restarted, Request(Turn2(file), 12));
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(restarted && got);
  ExpectSameOutput(*got, *want);
  EXPECT_EQ(got->finish.usage.cached_tokens, 0);
  const EngineStats stats = restarted->Stats();
  EXPECT_EQ(stats.prompt_tokens_disk, 0);
  EXPECT_GT(stats.kv_disk_corrupt_files, 0);
  EXPECT_NE(log.find("kv-cache:"), std::string::npos) << log;
}

TEST(DiskCacheSchedulerTest, FlippedTruncatedOrForeignFilesAreDiscardedAndComputed) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kStories;
  DamagedFilesCase(file, "flipped", [](const fs::path& path) {
    std::vector<uint8_t> bytes = testing_util::ReadBytes(path);
    bytes[bytes.size() / 2] ^= 0x5a;  // inside a payload: only its checksum can tell
    testing_util::WriteBytes(path, bytes);
  });
  DamagedFilesCase(file, "truncated",
                   [](const fs::path& path) { fs::resize_file(path, fs::file_size(path) - 100); });
  // The other model's files, renamed into this model's folder as this model's blocks.
  const fs::path other_dir = TempDir("other_model");
  PersistTurn1(kQwen, Options(other_dir));
  const std::vector<fs::path> foreign = SnapshotFiles(other_dir);
  ASSERT_FALSE(foreign.empty());
  DamagedFilesCase(file, "foreign", [&](const fs::path& path) {
    fs::copy_file(foreign[0], path, fs::copy_options::overwrite_existing);
  });
}

// A stored file decoded under the layout and block hash its own header names (the file
// must be a valid snapshot); the sections point into `bytes`.
Snapshot DecodeAsStored(const std::vector<uint8_t>& bytes) {
  Result<SnapshotHeader> header = DecodeSnapshotHeader(bytes);
  EXPECT_TRUE(header.ok()) << header.status().message();
  if (!header.ok()) return {};
  Result<Snapshot> snapshot = DecodeSnapshot(bytes, header->layout, header->block_hash);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status().message();
  return snapshot.ok() ? std::move(snapshot).value() : Snapshot{};
}

TEST(DiskCacheSchedulerTest, FileMissingOneStagesSectionLoadsNothingForItsBlock) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kQwen;
  SchedulerOptions options = Options(TempDir("missing_section"));
  options.placement.devices.assign(2, DeviceSpec{});
  options.placement.layer_split = {1, 1};
  options.threads = 1;
  auto want = ColdTurn2(file, 0);
  ASSERT_TRUE(want);
  PersistTurn1(file, options);
  // Rewrite every file with stage 0's section only: a valid snapshot, but not all stages.
  for (const fs::path& path : SnapshotFiles(options.kv_cache_dir)) {
    const std::vector<uint8_t> bytes = testing_util::ReadBytes(path);
    const Snapshot snapshot = DecodeAsStored(bytes);
    ASSERT_EQ(snapshot.sections.size(), 2u);
    std::vector<SnapshotSection> first_only = {snapshot.sections[0]};
    Result<std::vector<uint8_t>> rewritten = EncodeSnapshot(snapshot.header, first_only);
    ASSERT_TRUE(rewritten.ok()) << rewritten.status().message();
    testing_util::WriteBytes(path, *rewritten);
  }
  const size_t files_before = SnapshotFiles(options.kv_cache_dir).size();
  ::testing::internal::CaptureStderr();
  auto restarted = MakeScheduler(file, options);
  ASSERT_TRUE(restarted);
  auto got = RunOne(*restarted, Request(Turn2(file), 12));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(got->finish.usage.cached_tokens, 0);
  ExpectSameOutput(*got, *want);
  EXPECT_EQ(restarted->Stats().kv_disk_corrupt_files, 1);
  EXPECT_NE(log.find("no kv_page section for stage 1"), std::string::npos) << log;
  // The unusable file is deleted, not counted again on every request.
  ::testing::internal::CaptureStderr();
  got = RunOne(*restarted, Request(Turn2(file), 12));
  log = ::testing::internal::GetCapturedStderr();
  ExpectSameOutput(*got, *want);
  EXPECT_EQ(restarted->Stats().kv_disk_corrupt_files, 1) << log;
  EXPECT_EQ(log.find("no kv_page section"), std::string::npos) << log;
  // Turn 2 recomputed blocks 0-2 and wrote each whole: the block whose file failed, and the
  // two after it, whose files were never read (their load had stopped). Only block 3, which
  // turn 2 does not share, still has one section.
  restarted.reset();  // writes what is queued
  size_t one_section = 0;
  for (const fs::path& path : SnapshotFiles(options.kv_cache_dir)) {
    const std::vector<uint8_t> bytes = testing_util::ReadBytes(path);
    if (DecodeAsStored(bytes).sections.size() == 1) ++one_section;
  }
  EXPECT_EQ(files_before, 4u);
  EXPECT_EQ(one_section, 1u);
}

// The files of one chain in chain order (each names its parent in its header).
std::vector<fs::path> ChainOrder(const std::vector<fs::path>& files) {
  std::unordered_map<BlockHash, std::pair<BlockHash, fs::path>> by_parent;  // → (hash, file)
  for (const fs::path& path : files) {
    Result<SnapshotHeader> header = DecodeSnapshotHeader(testing_util::ReadBytes(path));
    EXPECT_TRUE(header.ok()) << path << ": " << header.status().message();
    if (header.ok()) by_parent[header->parent_hash] = {header->block_hash, path};
  }
  std::vector<fs::path> chain;
  for (auto it = by_parent.find(kRootBlockHash); it != by_parent.end();
       it = by_parent.find(it->second.first)) {
    chain.push_back(it->second.second);
  }
  return chain;
}

// A chain's load stops at its first bad file, so the files after it are never read; the
// request recomputes every block from there, and each is written again: one run heals every
// corrupt file of the chain (not one per restart), and the next restart hits them all.
TEST(DiskCacheSchedulerTest, EveryCorruptFileOfAChainIsRewrittenByTheRecompute) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kStories;
  const fs::path dir = TempDir("heal");
  PersistTurn1(file, Options(dir));
  const std::vector<fs::path> chain = ChainOrder(SnapshotFiles(dir));
  ASSERT_EQ(chain.size(), 4u);
  std::vector<std::vector<uint8_t>> good;
  for (const fs::path& path : chain) good.push_back(testing_util::ReadBytes(path));
  for (size_t i = 1; i < chain.size(); ++i) {
    std::vector<uint8_t> bytes = good[i];
    bytes[bytes.size() / 2] ^= 0x5a;  // inside a payload: only its checksum can tell
    testing_util::WriteBytes(chain[i], bytes);
  }
  {
    ::testing::internal::CaptureStderr();
    auto restarted = MakeScheduler(file, Options(dir));
    ASSERT_TRUE(restarted);
    auto got = RunOne(*restarted, Request(Turn1(file), 4));
    EXPECT_EQ(got->finish.usage.cached_disk_tokens, kPageTokens);  // block 0, then block 1 fails
    EXPECT_EQ(restarted->Stats().kv_disk_corrupt_files, 1);
    restarted.reset();  // writes what is queued
    (void)::testing::internal::GetCapturedStderr();
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    EXPECT_TRUE(testing_util::ReadBytes(chain[i]) == good[i])
        << "block " << i << " was not rewritten";
  }
  auto again = MakeScheduler(file, Options(dir));
  ASSERT_TRUE(again);
  auto got = RunOne(*again, Request(Turn1(file), 4));
  EXPECT_EQ(got->finish.usage.cached_disk_tokens, 4 * kPageTokens);
  EXPECT_EQ(again->Stats().kv_disk_corrupt_files, 0);
}

TEST(DiskCacheSchedulerTest, TinyBudgetAndTinyPoolEvictAndKeepServingCorrectly) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string file = kStories;
  const fs::path dir = TempDir("tiny");
  // Size one file, then allow three.
  PersistTurn1(file, Options(dir));
  const std::vector<fs::path> files = SnapshotFiles(dir);
  ASSERT_FALSE(files.empty());
  const uint64_t file_bytes = fs::file_size(files[0]);
  fs::remove_all(dir);
  fs::create_directories(dir);
  // 2 slots × 64 positions = 8 pages: cached pages (some waiting for export) make room.
  SchedulerOptions options = Options(dir, 64);
  options.kv_cache_budget = 3 * file_bytes + file_bytes / 2;
  auto cold = MakeScheduler(file, Options(fs::path(), 64));
  ASSERT_TRUE(cold);
  const char* starts[] = {"The cat", "Lily and Ben", "One day", "A big bird", "Tom had a"};
  for (int round = 0; round < 2; ++round) {
    auto warm = MakeScheduler(file, options);  // restarted every round
    ASSERT_TRUE(warm);
    // Round 1 starts with the prompt round 0 wrote last (still within the budget).
    for (int k = 0; k < 5; ++k) {
      const int i = round == 0 ? k : 4 - k;
      SCOPED_TRACE(fmt::format("round {} prompt {}", round, i));
      const EngineRequest request =
          Request(StoryTokens(file, 40, std::string(starts[i]) + " " + kLongText), 20);
      auto got = RunOne(*warm, request);
      auto want = RunOne(*cold, request);
      ExpectSameOutput(*got, *want);
    }
    const EngineStats stats = warm->Stats();
    EXPECT_LE(uint64_t(stats.kv_disk_bytes), options.kv_cache_budget);
    if (round == 1) {
      EXPECT_GT(stats.prompt_tokens_disk, 0);
    }
  }
  auto last = MakeScheduler(file, options);
  ASSERT_TRUE(last);
  EXPECT_LE(last->Stats().kv_disk_files, 3);
  EXPECT_LE(SnapshotFiles(dir).size(), 3u);
}

TEST(DiskCacheSchedulerTest, DiskTierNeedsThePrefixCache) {
  SHARDLM_REQUIRE_FIXTURES();
  SchedulerOptions options = Options(TempDir("needs_prefix"));
  options.prefix_cache = false;
  const Status status = options.Validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--no-prefix-cache"), std::string::npos) << status.message();
}

}  // namespace disk_cache_scheduler_test
}  // namespace shardlm
