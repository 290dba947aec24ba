// The scheduler's in-memory prefix cache on the fixture models: a request sharing a long
// prefix with an earlier one reports the full-page prefix as cached_tokens and gives bitwise
// the tokens and logprobs of a cold scheduler; a multi-turn conversation hits the previous
// turn's prompt and reply; a wholly cached prompt still answers; two concurrent requests
// with a common prefix share its pages; a small pool evicts cached pages and keeps serving
// correctly; prefix_cache = false never hits; a 2-stage pipeline behaves the same; a lost
// stage empties the cache (its pages are gone) and serving resumes cold and correct.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "pipeline/fake_stage.h"
#include "pipeline/stage_factory.h"

namespace shardlm {
namespace prefix_cache_scheduler_test {

using scheduler_test_util::Collector;
using scheduler_test_util::Concat;
using scheduler_test_util::Encode;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::Fixture;
using scheduler_test_util::kLongText;
using scheduler_test_util::kPageTokens;
using scheduler_test_util::kQwen;
using scheduler_test_util::kStories;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunAll;
using scheduler_test_util::RunOne;
using scheduler_test_util::StoryTokens;

SchedulerOptions Options(int n_parallel, bool prefix_cache, int n_ctx = 256) {
  SchedulerOptions options = scheduler_test_util::TestOptions(n_parallel, n_ctx);
  options.prefix_cache = prefix_cache;
  return options;
}

// A prompt sharing the first 53 tokens with an earlier one: 3 full pages hit.
void SharedPrefixCase(const std::string& file, const SchedulerOptions& warm_options) {
  const std::vector<TokenId> first = StoryTokens(file, 70, kLongText);
  const std::vector<TokenId> second =
      Concat(std::vector<TokenId>(first.begin(), first.begin() + 53),
             Encode(file, " The cat sat on the mat and looked at the sun.", false));
  auto cold = MakeScheduler(file, Options(2, false));
  ASSERT_TRUE(cold);
  for (uint64_t seed : {0, 7}) {
    SCOPED_TRACE(seed);
    auto warm = MakeScheduler(file, warm_options);
    ASSERT_TRUE(warm);
    auto want = RunOne(*cold, Request(second, 12, seed));
    auto a = RunOne(*warm, Request(first, 4, seed));
    EXPECT_EQ(a->finish.usage.cached_tokens, 0);
    auto got = RunOne(*warm, Request(second, 12, seed));
    EXPECT_EQ(got->finish.usage.cached_tokens, 3 * kPageTokens);
    EXPECT_EQ(want->finish.usage.cached_tokens, 0);
    ExpectSameOutput(*got, *want);
    const EngineStats stats = warm->Stats();
    EXPECT_EQ(stats.prefix_cache_hit_blocks, 3);
    EXPECT_EQ(stats.prompt_tokens_cached, 3 * kPageTokens);
    EXPECT_EQ(stats.prompt_tokens_computed + stats.prompt_tokens_cached, stats.prompt_tokens_total);
    EXPECT_EQ(stats.kv_pages_used, 0);  // nothing runs; cached pages are counted apart
    EXPECT_GT(stats.prefix_cache_pages, 0);
  }
}

TEST(PrefixCacheSchedulerTest, SharedPrefixHitsAndIsBitwiseCold) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    SCOPED_TRACE(file);
    SharedPrefixCase(file, Options(2, true));
  }
}

TEST(PrefixCacheSchedulerTest, TwoStagePipelineHitsAndIsBitwiseCold) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    SCOPED_TRACE(file);
    SchedulerOptions split = Options(2, true);
    split.placement.devices.assign(2, DeviceSpec{});
    split.placement.layer_split = {1, 1};
    split.threads = 1;
    SharedPrefixCase(file, split);
  }
}

TEST(PrefixCacheSchedulerTest, MultiTurnConversationHitsPromptAndReply) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    SCOPED_TRACE(file);
    auto cold = MakeScheduler(file, Options(2, false));
    auto warm = MakeScheduler(file, Options(2, true));
    ASSERT_TRUE(cold && warm);
    const std::vector<TokenId> turn1 = StoryTokens(file, 37, kLongText);
    auto reply = RunOne(*warm, Request(turn1, 30));
    ASSERT_EQ(reply->ids.size(), 30u);
    const std::vector<TokenId> turn2 =
        Concat(Concat(turn1, reply->ids), Encode(file, " Then they went home.", false));
    auto got = RunOne(*warm, Request(turn2, 10));
    auto want = RunOne(*cold, Request(turn2, 10));
    // The KV of turn 1 holds its prompt and every reply token but the last (never fed).
    const int written = int(turn1.size()) + 30 - 1;
    EXPECT_EQ(got->finish.usage.cached_tokens, written / kPageTokens * kPageTokens);
    ExpectSameOutput(*got, *want);
  }
}

TEST(PrefixCacheSchedulerTest, WhollyCachedPromptRecomputesItsLastToken) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    for (int n : {3 * kPageTokens, 3 * kPageTokens + 5}) {
      SCOPED_TRACE(fmt::format("{}: {} tokens", file, n));
      auto warm = MakeScheduler(file, Options(2, true));
      ASSERT_TRUE(warm);
      const std::vector<TokenId> prompt = StoryTokens(file, n, kLongText);
      auto first = RunOne(*warm, Request(prompt, 8, 3));
      auto second = RunOne(*warm, Request(prompt, 8, 3));
      EXPECT_EQ(first->finish.usage.cached_tokens, 0);
      EXPECT_EQ(second->finish.usage.cached_tokens, std::min(n - 1, 3 * kPageTokens));
      ExpectSameOutput(*second, *first);
      // The shared last page was copied, not written: a third run still hits and agrees.
      auto third = RunOne(*warm, Request(prompt, 8, 3));
      EXPECT_EQ(third->finish.usage.cached_tokens, second->finish.usage.cached_tokens);
      ExpectSameOutput(*third, *first);
    }
  }
}

// Pages held while two requests with a 96-token common prefix run (the engine held inside
// the second one's 2nd token), after a first request cached that prefix.
int64_t PagesUsedByTwoConcurrent(bool prefix_cache) {
  auto scheduler = MakeScheduler(kStories, Options(2, prefix_cache));
  if (!scheduler) return -1;
  const std::vector<TokenId> prefix = StoryTokens(kStories, 6 * kPageTokens, kLongText);
  (void)RunOne(*scheduler, Request(Concat(prefix, Encode(kStories, " Max", false)), 2));
  Collector a, b;
  auto ida = scheduler->Submit(Request(Concat(prefix, Encode(kStories, " Lily", false)), 40),
                               a.Callbacks());
  EXPECT_TRUE(ida.ok());
  auto idb = scheduler_test_util::SubmitHeld(
      *scheduler, Request(Concat(prefix, Encode(kStories, " The sun", false)), 40), b, 2);
  EXPECT_TRUE(idb.ok());
  const int64_t used = scheduler->Stats().kv_pages_used;
  b.release.set_value();
  EXPECT_TRUE(a.Wait() && b.Wait());
  EXPECT_EQ(a.finish.usage.cached_tokens, prefix_cache ? 6 * kPageTokens : 0);
  EXPECT_EQ(b.finish.usage.cached_tokens, prefix_cache ? 6 * kPageTokens : 0);
  return used;
}

TEST(PrefixCacheSchedulerTest, ConcurrentRequestsShareTheCachedPrefixPages) {
  SHARDLM_REQUIRE_FIXTURES();
  // Each sequence spans 7 pages (96 prefix + a few suffix and generated tokens).
  const int64_t shared = PagesUsedByTwoConcurrent(true);
  const int64_t separate = PagesUsedByTwoConcurrent(false);
  EXPECT_GE(separate, 14);
  EXPECT_GE(shared, 7);
  EXPECT_LE(shared, 6 + 2 * 2);  // the prefix once, each tail at most 2 pages
}

TEST(PrefixCacheSchedulerTest, SmallPoolEvictsAndKeepsServingCorrectly) {
  SHARDLM_REQUIRE_FIXTURES();
  // 2 slots × 64 positions = 8 pages: cached prompts must make room for new ones.
  auto cold = MakeScheduler(kStories, Options(2, false, 64));
  auto warm = MakeScheduler(kStories, Options(2, true, 64));
  ASSERT_TRUE(cold && warm);
  const char* starts[] = {"The cat",   "Lily and Ben", "One day",   "A big bird",
                          "Tom had a", "The sun was",  "Sue found", "In the park"};
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(Request(StoryTokens(kStories, 40, std::string(starts[i]) + " " + kLongText),
                               20, i % 2 ? 11 + i : 0));
  }
  // Twice: the second round finds some prompts still cached, others evicted.
  for (int round = 0; round < 2; ++round) {
    auto want = RunAll(*cold, requests);
    auto got = RunAll(*warm, requests);
    for (size_t r = 0; r < requests.size(); ++r) {
      SCOPED_TRACE(fmt::format("round {} request {}", round, r));
      EXPECT_EQ(got[r]->finish.reason, FinishReason::kLength);
      ExpectSameOutput(*got[r], *want[r]);
    }
  }
  const EngineStats stats = warm->Stats();
  EXPECT_GT(stats.prefix_cache_evicted_pages, 0);
  EXPECT_LE(stats.prefix_cache_pages, stats.kv_pages_total);
  EXPECT_EQ(stats.kv_pages_used, 0);
}

TEST(PrefixCacheSchedulerTest, DisabledCacheNeverHits) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options(2, false));
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> prompt = StoryTokens(kStories, 70, kLongText);
  auto first = RunOne(*scheduler, Request(prompt, 6));
  auto second = RunOne(*scheduler, Request(prompt, 6));
  EXPECT_EQ(second->finish.usage.cached_tokens, 0);
  ExpectSameOutput(*second, *first);
  const EngineStats stats = scheduler->Stats();
  EXPECT_EQ(stats.prompt_tokens_cached, 0);
  EXPECT_EQ(stats.prompt_tokens_computed, 140);
  EXPECT_EQ(stats.prefix_cache_pages, 0);
  EXPECT_EQ(stats.kv_pages_used, 0);
}

TEST(PrefixCacheSchedulerTest, LostStageEmptiesTheCache) {
  SHARDLM_REQUIRE_FIXTURES();
  const LoadedModel& loaded = Fixture(kStories);
  ASSERT_TRUE(loaded.model);
  SchedulerOptions options = Options(2, true);
  options.placement.devices.assign(2, DeviceSpec{});
  options.placement.layer_split = {1, 1};
  options.threads = 1;
  scheduler_test_util::FaultySplit split =
      scheduler_test_util::SchedulerWithFaultyStage1(loaded, options);
  ASSERT_TRUE(split.scheduler);
  testing::FaultyStage* faulty = split.faulty;
  Scheduler& scheduler = *split.scheduler;

  const std::vector<TokenId> prompt = StoryTokens(kStories, 70, kLongText);
  auto first = RunOne(scheduler, Request(prompt, 6));
  EXPECT_GE(scheduler.Stats().prefix_cache_pages, 4);
  faulty->FailAfter(0);
  auto failed = RunOne(scheduler, Request(prompt, 6));
  EXPECT_EQ(failed->finish.reason, FinishReason::kError);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!scheduler.Health().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(scheduler.Health().ok()) << scheduler.Health().message();
  EXPECT_EQ(scheduler.Stats().prefix_cache_pages, 0);
  auto again = RunOne(scheduler, Request(prompt, 6));
  EXPECT_EQ(again->finish.usage.cached_tokens, 0);
  ExpectSameOutput(*again, *first);
}

}  // namespace prefix_cache_scheduler_test
}  // namespace shardlm
