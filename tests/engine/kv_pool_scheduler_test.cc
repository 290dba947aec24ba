// Bounded KV residency through the engine: a context that fits its pool is bitwise the
// unbounded output; past the pool, a long story through a pool of a few pages gives the same
// tokens and logits on every thread count, local split and tier (RAM or file), with both page
// selections; the moves show in the stage stats; a pool below its floor is refused; a
// conversation past the pool continues the same after a restart or a slot restore; a
// conversation of several thousand tokens is the same on every split and remote stage, and
// goes on when its shard daemon restarts.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace kv_pool_scheduler_test {

namespace util = scheduler_test_util;
using testing_util::TempDir;

// One sequence, pages of 16 positions, a sink of one page, a tail of two, a reselection every
// 8 tokens: the floor is 5 pages (80 positions).
SchedulerOptions PoolOptions(int pool_tokens, PageSelect select, int n_ctx = 4096) {
  SchedulerOptions options = util::TestOptions(1, n_ctx, 64);
  options.kv_pool.pool_tokens = pool_tokens;
  options.kv_pool.sink_tokens = 16;
  options.kv_pool.tail_tokens = 32;
  options.kv_pool.reselect_tokens = 8;
  options.kv_pool.select = select;
  return options;
}

// `options` on one thread.
SchedulerOptions OneThread(SchedulerOptions options) {
  options.threads = 1;
  return options;
}

// `options` split in two local stages of one thread each.
SchedulerOptions LocalSplit(SchedulerOptions options) {
  options.placement.devices.assign(2, DeviceSpec{});
  options.placement.layer_split = {1, 1};
  return OneThread(options);
}

// `options` with its pages outside the pool in a file under `dir`.
SchedulerOptions WithFileTier(SchedulerOptions options, const std::filesystem::path& dir) {
  options.kv_tier.kind = KvTierSpec::Kind::kFile;
  options.kv_tier.dir = dir.string();
  return options;
}

std::unique_ptr<util::Collector> Generate(const std::string& file, const SchedulerOptions& options,
                                          int n_prompt, int n_gen, uint64_t seed) {
  auto scheduler = util::MakeScheduler(file, options);
  if (!scheduler) return nullptr;
  return util::RunOne(
      *scheduler, util::Request(util::StoryTokens(file, n_prompt, util::kLongText), n_gen, seed));
}

// gemma3's windowed layers (window 16) under a pool: the tail keeps their window resident.
// qwen35's recurrent layers have no pages: only its attention layer's pages are pooled, and
// its state is never paged. gemma4's layers keep KV of two head shapes (the qk summaries bound
// each layer in its own), and its last layers read earlier layers' pages.
constexpr char kGemma3[] = "gemma3-tiny.gguf";

TEST(KvPoolSchedulerTest, AContextInsideThePoolIsBitwiseTheUnboundedOne) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {util::kStories, util::kQwen, kGemma3, util::kQwen35, util::kGemma4}) {
    for (PageSelect select : {PageSelect::kQk, PageSelect::kLru}) {
      for (uint64_t seed : {0, 5}) {
        SCOPED_TRACE(std::string(file) + " " + PageSelectName(select) + " seed " +
                     std::to_string(seed));
        SchedulerOptions pooled = PoolOptions(256, select);
        ASSERT_TRUE(pooled.bounded_kv());
        auto want = Generate(file, util::TestOptions(1, 4096, 64), 150, 60, seed);
        auto got = Generate(file, pooled, 150, 60, seed);
        ASSERT_TRUE(want && got);
        EXPECT_EQ(got->finish.reason, FinishReason::kLength);
        util::ExpectSameOutput(*got, *want);
      }
    }
  }
}

// A 1200-token story and 160 generated tokens through a 128-position pool (8 pages: under
// 1/10 of the context): the same output whatever runs it.
TEST(KvPoolSchedulerTest, ABoundedPoolGivesTheSameOutputOnEveryThreadCountSplitAndTier) {
  SHARDLM_REQUIRE_FIXTURES();
  TempDir tier_dir("kv_pool_tier");
  for (const char* file : util::ModelsUnlessSanitized(
           {util::kStories, util::kQwen, kGemma3, util::kQwen35, util::kGemma4},
           {util::kStories, util::kQwen35, util::kGemma4})) {
    for (PageSelect select : {PageSelect::kQk, PageSelect::kLru}) {
      SCOPED_TRACE(std::string(file) + " " + PageSelectName(select));
      const SchedulerOptions base = PoolOptions(128, select);
      auto want = Generate(file, base, 1200, 160, 3);
      ASSERT_TRUE(want);
      EXPECT_EQ(want->ids.size(), 160u);
      const SchedulerOptions one_thread = OneThread(base);
      const SchedulerOptions split = LocalSplit(base);
      const SchedulerOptions file_tier = WithFileTier(base, tier_dir.path());
      for (const SchedulerOptions* options : {&one_thread, &split, &file_tier}) {
        auto got = Generate(file, *options, 1200, 160, 3);
        ASSERT_TRUE(got);
        util::ExpectSameOutput(*got, *want);
      }
      // Stage 1 in a shard daemon: the same moves cross the socket, the scores come back.
      const std::string socket = tier_dir.File("shard.sock");
      util::ServiceThread daemon(socket);
      ASSERT_TRUE(daemon.ok());
      auto remote = Generate(file, util::WithRemoteStage(file_tier, socket), 1200, 160, 3);
      ASSERT_TRUE(remote);
      util::ExpectSameOutput(*remote, *want);
    }
  }
}

TEST(KvPoolSchedulerTest, TheStagesHoldThePoolAndMovePagesThroughTheTier) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = util::MakeScheduler(util::kStories, PoolOptions(128, PageSelect::kQk));
  ASSERT_TRUE(scheduler);
  auto run = util::RunOne(
      *scheduler, util::Request(util::StoryTokens(util::kStories, 600, util::kLongText), 40));
  ASSERT_EQ(run->finish.reason, FinishReason::kLength);
  const std::vector<StageStats> stats = scheduler->stage_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].paging.resident_pages, 8);  // the sequence's pool, retained by its slot
  EXPECT_GT(stats[0].paging.page_outs, 0u);
  EXPECT_GT(stats[0].paging.tier_pages, 0);
  EXPECT_GT(stats[0].paging.bytes_paged, 0u);
  // The request's own page-ins (its usage and log line): reselections brought pages back.
  EXPECT_GT(run->finish.usage.kv_page_ins, 0);
  EXPECT_LE(uint64_t(run->finish.usage.kv_page_ins), stats[0].paging.page_ins);
  EXPECT_GT(scheduler->Stats().kv_pool_select_seconds, 0.0);
  // The stage's memory is its 8 frames, not the context's 256 pages.
  auto unbounded = util::MakeScheduler(util::kStories, util::TestOptions(1, 4096, 64));
  ASSERT_TRUE(unbounded);
  EXPECT_EQ(scheduler->info().stages[0].kv_bytes * 32, unbounded->info().stages[0].kv_bytes);
}

TEST(KvPoolSchedulerTest, PinnedRangesStayAndPinsPastThePoolAreRefused) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = util::MakeScheduler(util::kStories, PoolOptions(128, PageSelect::kLru));
  ASSERT_TRUE(scheduler);
  EngineRequest request = util::Request(util::StoryTokens(util::kStories, 600, util::kLongText), 8);
  // 8 pages: sink 1 + tail 2 + 2 for writes leave 3 pages for pins.
  request.pins = {{100, 120}, {200, 216}};  // pages 6, 7, 12 and 13
  Result<RequestId> refused = scheduler->Submit(request, {});
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("4 pinned pages"), std::string::npos)
      << refused.status().message();
  request.pins = {{100, 120}};  // pages 6 and 7
  auto pinned = util::RunOne(*scheduler, request);
  ASSERT_EQ(pinned->finish.reason, FinishReason::kLength);
  EXPECT_EQ(scheduler->Stats().kv_pool_pinned_pages, 2);
  // The same request without pins on a fresh engine: LRU lets pages 6 and 7 go.
  auto fresh = util::MakeScheduler(util::kStories, PoolOptions(128, PageSelect::kLru));
  ASSERT_TRUE(fresh);
  request.pins.clear();
  auto unpinned = util::RunOne(*fresh, request);
  ASSERT_EQ(unpinned->finish.reason, FinishReason::kLength);
  EXPECT_NE(unpinned->logprobs, pinned->logprobs);
  request.pins = {{0, 5000}};
  EXPECT_EQ(scheduler->Submit(request, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvPoolSchedulerTest, APoolBelowItsFloorIsRefusedNamingTheSizes) {
  SHARDLM_REQUIRE_FIXTURES();
  const LoadedModel& loaded = util::Fixture(util::kStories);
  ASSERT_TRUE(loaded.model);
  Result<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(*loaded.model, *loaded.tokenizer, PoolOptions(64, PageSelect::kQk));
  ASSERT_EQ(scheduler.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(scheduler.status().message().find("--kv-pool 64"), std::string::npos)
      << scheduler.status().message();
  // A pool that holds the whole context bounds nothing: the unbounded engine.
  EXPECT_FALSE(PoolOptions(4096, PageSelect::kQk).bounded_kv());
  // Windows kept in pages: a tail shorter than a windowed layer's window is raised to it (the
  // tail keeps the window resident); a pool with no room for the raised tail is refused naming
  // the sizes. Windows kept in rings are outside the pool: the tail stays as asked.
  const LoadedModel& gemma = util::Fixture(kGemma3);
  ASSERT_TRUE(gemma.model);
  SchedulerOptions short_tail = PoolOptions(128, PageSelect::kQk);
  short_tail.kv_pool.tail_tokens = 8;
  scheduler = Scheduler::Create(*gemma.model, *gemma.tokenizer, short_tail);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().message();
  EXPECT_EQ((*scheduler)->options().kv_pool.tail_tokens, 8);
  short_tail.window_kv = WindowKv::kFull;
  scheduler = Scheduler::Create(*gemma.model, *gemma.tokenizer, short_tail);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().message();
  EXPECT_EQ((*scheduler)->options().kv_pool.tail_tokens, 16);
  SchedulerOptions no_room = short_tail;
  no_room.kv_pool.tail_tokens = 0;
  no_room.kv_pool.pool_tokens = 48;  // 3 pages: sink 1 + writes 2, no room for a tail page
  scheduler = Scheduler::Create(*gemma.model, *gemma.tokenizer, no_room);
  ASSERT_EQ(scheduler.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(scheduler.status().message().find("--kv-tail 16"), std::string::npos)
      << scheduler.status().message();
}

// A tier file truncated under a running server: the request that needs a page from it ends
// with an error naming the file, a request beside it runs on unharmed, and the same prompt
// sent again is computed afresh (the cache forgot the lost pages). Also through a shard
// daemon, whose stage reports its losses over the socket.
TEST(KvPoolSchedulerTest, ALostTierPageFailsOnlyTheRequestsThatNeedIt) {
  SHARDLM_REQUIRE_FIXTURES();
  TempDir dir("kv_pool_loss");
  const std::string file = util::kStories;
  for (bool remote : {false, true}) {
    SCOPED_TRACE(remote ? "remote stage" : "local");
    const std::filesystem::path tier_dir = dir.path() / (remote ? "remote" : "local");
    std::filesystem::create_directories(tier_dir);
    SchedulerOptions options = PoolOptions(128, PageSelect::kQk);
    options.n_parallel = 2;
    options.prefix_cache = true;
    options.kv_tier.kind = KvTierSpec::Kind::kFile;
    options.kv_tier.dir = tier_dir.string();
    std::unique_ptr<util::ServiceThread> daemon;
    if (remote) {
      daemon = std::make_unique<util::ServiceThread>(dir.File("loss.sock"));
      ASSERT_TRUE(daemon->ok());
      options = util::WithRemoteStage(options, dir.File("loss.sock"));
    }
    const std::vector<TokenId> a = util::StoryTokens(file, 1200, util::kLongText);
    const std::vector<TokenId> b =
        util::Concat(a, util::Encode(file, " The cat sat on the mat.", false));
    // Inside the pool: its output does not depend on what shares its batches.
    const std::vector<TokenId> c = util::StoryTokens(file, 100, "A big bird sang in the rain.");
    std::unique_ptr<util::Collector> want_c;
    {
      auto fresh = util::MakeScheduler(file, options);
      ASSERT_TRUE(fresh);
      want_c = util::RunOne(*fresh, util::Request(c, 16, 5));
    }
    auto scheduler = util::MakeScheduler(file, options);
    ASSERT_TRUE(scheduler);
    ASSERT_EQ(util::RunOne(*scheduler, util::Request(a, 8))->finish.reason, FinishReason::kLength);
    int truncated = 0;
    for (const auto& entry : std::filesystem::directory_iterator(tier_dir)) {
      std::filesystem::resize_file(entry.path(), 0);
      ++truncated;
    }
    ASSERT_EQ(truncated, remote ? 2 : 1);
    auto runs = util::RunAll(*scheduler, {util::Request(b, 16, 5), util::Request(c, 16, 5)});
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0]->finish.reason, FinishReason::kError);
    EXPECT_NE(runs[0]->finish.error.message().find("KV tier"), std::string::npos)
        << runs[0]->finish.error.message();
    EXPECT_EQ(runs[1]->finish.reason, FinishReason::kLength);
    util::ExpectSameOutput(*runs[1], *want_c);
    // The server keeps serving: the same prompt again is computed, not read from lost pages.
    auto again = util::RunOne(*scheduler, util::Request(b, 16, 5));
    EXPECT_EQ(again->finish.reason, FinishReason::kLength);
    EXPECT_LT(again->finish.usage.cached_tokens, 1200);
  }
}

// A chat's standing prefix (its system prompt and tools) is pinned as far as the pool has
// room, never refused; the usage says what was pinned.
TEST(KvPoolSchedulerTest, AStandingPrefixIsPinnedAsFarAsThePoolHasRoom) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = util::MakeScheduler(util::kStories, PoolOptions(128, PageSelect::kLru));
  ASSERT_TRUE(scheduler);
  // 8 pages: sink 1 + tail 2 + 2 for writes leave 3 pages to pin.
  EngineRequest request = util::Request(util::StoryTokens(util::kStories, 600, util::kLongText), 8);
  request.pin_prefix = 100;
  auto clipped = util::RunOne(*scheduler, request);
  ASSERT_EQ(clipped->finish.reason, FinishReason::kLength);
  using Ranges = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(clipped->finish.usage.kv_pins, (Ranges{{0, 48}}));
  request.pins = {{208, 224}};  // 1 page: 2 are left for the prefix
  auto both = util::RunOne(*scheduler, request);
  EXPECT_EQ(both->finish.usage.kv_pins, (Ranges{{208, 224}, {0, 32}}));
  // Pinning changes what attention reads past the pool: the pinned prefix is kept.
  request.pins.clear();
  request.pin_prefix = 0;
  auto unpinned = util::RunOne(*scheduler, request);
  EXPECT_TRUE(unpinned->finish.usage.kv_pins.empty());
  EXPECT_NE(unpinned->logprobs, clipped->logprobs);
  request.pin_prefix = -1;
  EXPECT_EQ(scheduler->Submit(request, {}).status().code(), StatusCode::kInvalidArgument);
}

// Turn 1 (1200 prompt tokens, 40 generated, greedy) through a 128-position pool; turn 2
// continues it with a few more tokens and samples 40 with a seed.
struct Conversation {
  std::vector<TokenId> turn1;
  std::vector<TokenId> turn2;  // filled from turn 1's reply
  static constexpr int kTurn1Generated = 40;
  // Turn 1's positions with KV (its last token was never fed), in full pages.
  static int Turn2Cached() {
    return (1200 + kTurn1Generated - 1) / util::kPageTokens * util::kPageTokens;
  }
};

SchedulerOptions ConversationOptions(const std::filesystem::path& cache_dir, PageSelect select) {
  SchedulerOptions options = PoolOptions(128, select);
  options.prefix_cache = true;
  options.kv_cache_dir = cache_dir.string();
  return options;
}

// The pool's choice of pages is kept with the cached prefix (memory, disk and slot files),
// so turn 2 starts from the same resident pages whichever way turn 1 reached it. Without
// that a restarted server would begin turn 2 from no choice at all and answer differently.
// qwen35's recurrent state travels the same ways (its slot file holds a selection and a
// state; its remote split puts two recurrent layers and no KV in stage 0).
TEST(KvPoolSchedulerTest, ANextTurnPastThePoolIsTheSameAfterARestartOrASlotRestore) {
  SHARDLM_REQUIRE_FIXTURES();
  TempDir dir("kv_pool_turns");
  for (const char* file : util::ModelsUnlessSanitized({util::kStories, util::kQwen, util::kQwen35},
                                                      {util::kStories, util::kQwen35})) {
    for (PageSelect select : {PageSelect::kQk, PageSelect::kLru}) {
      for (bool remote : {false, true}) {
        SCOPED_TRACE(std::string(file) + " " + PageSelectName(select) +
                     (remote ? " remote stage" : ""));
        const std::string tag = std::string(PageSelectName(select)) + (remote ? "_remote" : "") +
                                std::filesystem::path(file).stem().string();
        const std::filesystem::path cache_dir = dir.path() / ("cache_" + tag);
        std::filesystem::create_directories(cache_dir);
        std::unique_ptr<util::ServiceThread> daemon;
        SchedulerOptions options = ConversationOptions(cache_dir, select);
        if (remote) {
          daemon = std::make_unique<util::ServiceThread>(dir.File("shard_" + tag + ".sock"));
          ASSERT_TRUE(daemon->ok());
          options = util::WithRemoteStage(options, dir.File("shard_" + tag + ".sock"));
        }
        const std::filesystem::path slot_file = dir.path() / ("slot_" + tag);
        SchedulerOptions no_disk = options;
        no_disk.kv_cache_dir.clear();
        Conversation talk;
        talk.turn1 = util::StoryTokens(file, 1200, util::kLongText);
        auto run_turn1 = [&](Scheduler& scheduler) {
          auto reply =
              util::RunOne(scheduler, util::Request(talk.turn1, Conversation::kTurn1Generated));
          EXPECT_EQ(reply->finish.reason, FinishReason::kLength);
          talk.turn2 = util::Concat(util::Concat(talk.turn1, reply->ids),
                                    util::Encode(file, " The cat sat on the mat.", false));
        };
        // Never restarted: turn 1, then turn 2 on the same server.
        std::unique_ptr<util::Collector> want;
        {
          auto running = util::MakeScheduler(file, no_disk);
          ASSERT_TRUE(running);
          run_turn1(*running);
          Result<SlotSaveResult> saved = running->SaveSlot(0, slot_file);
          ASSERT_TRUE(saved.ok()) << saved.status().message();
          want = util::RunOne(*running, util::Request(talk.turn2, 40, 3));
          EXPECT_EQ(want->finish.usage.cached_tokens, Conversation::Turn2Cached());
          if (select == PageSelect::kQk) {
            EXPECT_GT(running->Stats().kv_pool_reselects, 0);
          }
        }
        // Turn 1, a restart on the disk cache, turn 2: it prefills only its new tokens.
        {
          auto first = util::MakeScheduler(file, options);
          ASSERT_TRUE(first);
          run_turn1(*first);
        }
        auto restarted = util::MakeScheduler(file, options);
        ASSERT_TRUE(restarted);
        auto got = util::RunOne(*restarted, util::Request(talk.turn2, 40, 3));
        EXPECT_EQ(got->finish.usage.cached_disk_tokens, Conversation::Turn2Cached());
        util::ExpectSameOutput(*got, *want);
        restarted.reset();
        // Turn 1 restored from the slot file on a server without a disk cache.
        auto restored = util::MakeScheduler(file, no_disk);
        ASSERT_TRUE(restored);
        Result<SlotRestoreResult> read = restored->RestoreSlot(0, slot_file);
        ASSERT_TRUE(read.ok()) << read.status().message();
        auto again = util::RunOne(*restored, util::Request(talk.turn2, 40, 3));
        EXPECT_EQ(again->finish.usage.cached_tokens, Conversation::Turn2Cached());
        util::ExpectSameOutput(*again, *want);
      }
    }
  }
}

// A conversation of four turns growing to about 4200 tokens through a 128-position pool (8
// pages, 1/33 of the context at the end): each turn continues the last one's reply with 800
// more tokens of story.
struct LongConversation {
  static constexpr int kTurns = 4;
  static constexpr int kFirstPrompt = 1500;
  static constexpr int kMorePerTurn = 800;
  static constexpr int kGenerated = 48;
  // The positions a turn finds cached: every full page of the previous turn's KV (its last
  // generated token was never fed).
  static int CachedAfter(size_t prompt_tokens) {
    return int(prompt_tokens + kGenerated - 1) / util::kPageTokens * util::kPageTokens;
  }
};

std::vector<TokenId> MoreStory(const std::string& file, int n) {
  std::vector<TokenId> tokens;
  const std::vector<TokenId> more = util::Encode(file, " " + std::string(util::kLongText), false);
  while (int(tokens.size()) < n) tokens.insert(tokens.end(), more.begin(), more.end());
  tokens.resize(size_t(n));
  return tokens;
}

SchedulerOptions LongConversationOptions(PageSelect select) {
  SchedulerOptions options = PoolOptions(128, select, 8192);
  options.prefix_cache = true;
  return options;
}

// The prompt of turn `turn` (0-based) after `replies` (one per earlier turn).
std::vector<TokenId> LongConversationPrompt(const std::string& file,
                                            const std::vector<TokenId>& previous,
                                            const std::vector<TokenId>& reply, int turn) {
  if (turn == 0) return util::StoryTokens(file, LongConversation::kFirstPrompt, util::kLongText);
  return util::Concat(util::Concat(previous, reply),
                      MoreStory(file, LongConversation::kMorePerTurn));
}

// Runs the whole conversation on one scheduler; each turn samples with its own seed.
std::vector<std::unique_ptr<util::Collector>> RunLongConversation(const std::string& file,
                                                                  Scheduler& scheduler) {
  std::vector<std::unique_ptr<util::Collector>> replies;
  std::vector<TokenId> prompt;
  for (int turn = 0; turn < LongConversation::kTurns; ++turn) {
    const size_t previous_tokens = prompt.size();
    prompt = LongConversationPrompt(file, prompt,
                                    turn > 0 ? replies.back()->ids : std::vector<TokenId>{}, turn);
    replies.push_back(util::RunOne(
        scheduler, util::Request(prompt, LongConversation::kGenerated, uint64_t(turn))));
    EXPECT_EQ(replies.back()->finish.reason, FinishReason::kLength) << "turn " << turn;
    EXPECT_EQ(replies.back()->finish.usage.cached_tokens,
              turn == 0 ? 0 : LongConversation::CachedAfter(previous_tokens))
        << "turn " << turn;
  }
  return replies;
}

// Waits until the disk tier stops growing (its writes are behind the engine).
void WaitForDiskWrites(Scheduler& scheduler) {
  int64_t last = -1;
  for (int stable = 0; stable < 5;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    const int64_t now = scheduler.Stats().kv_disk_bytes_written;
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
}

// Sends `request` until the engine accepts and finishes it (a reconnecting engine refuses
// requests until its stages are back).
std::unique_ptr<util::Collector> RunOnceServing(Scheduler& scheduler,
                                                const EngineRequest& request) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!scheduler.Health().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return util::RunOne(scheduler, request);
}

// Several thousand tokens of conversation through a pool of 8 pages: every turn gives the
// same tokens and logits on one thread, a local split with a file tier and a stage in a shard
// daemon. Then the daemon dies: between two turns, the next turn continues from the disk
// cache with the same text; under load, the running turn fails with the stage named and the
// turn sent again is served.
TEST(KvPoolSchedulerTest, ALongConversationThroughAFewPagesIsTheSameOnEverySplitAndRemoteStage) {
  SHARDLM_REQUIRE_FIXTURES();
  TempDir dir("kv_pool_long");
  for (const char* file :
       util::ModelsUnlessSanitized({util::kStories, util::kQwen, util::kQwen35}, {util::kQwen35})) {
    SCOPED_TRACE(file);
    const std::string tag = std::filesystem::path(file).stem().string();
    const SchedulerOptions base = LongConversationOptions(PageSelect::kQk);
    auto want_scheduler = util::MakeScheduler(file, base);
    ASSERT_TRUE(want_scheduler);
    const auto want = RunLongConversation(file, *want_scheduler);
    want_scheduler.reset();
    ASSERT_EQ(want.size(), size_t(LongConversation::kTurns));

    const SchedulerOptions one_thread = OneThread(base);
    const SchedulerOptions split = WithFileTier(LocalSplit(base), dir.path());
    const std::string socket = dir.File("shard_" + tag + ".sock");
    auto daemon = std::make_unique<util::ServiceThread>(socket);
    ASSERT_TRUE(daemon->ok());
    const SchedulerOptions remote = util::WithRemoteStage(split, socket);
    for (const SchedulerOptions* options : {&one_thread, &split, &remote}) {
      auto scheduler = util::MakeScheduler(file, *options);
      ASSERT_TRUE(scheduler);
      const auto got = RunLongConversation(file, *scheduler);
      ASSERT_EQ(got.size(), want.size());
      for (size_t turn = 0; turn < got.size(); ++turn) {
        SCOPED_TRACE("turn " + std::to_string(turn));
        util::ExpectSameOutput(*got[turn], *want[turn]);
      }
    }

    // The daemon restarts between turns 2 and 3 of a server with a disk cache.
    const std::filesystem::path cache_dir = dir.path() / ("cache_" + tag);
    std::filesystem::create_directories(cache_dir);
    SchedulerOptions cached = remote;
    cached.kv_cache_dir = cache_dir.string();
    auto scheduler = util::MakeScheduler(file, cached);
    ASSERT_TRUE(scheduler);
    std::vector<TokenId> prompt;
    std::vector<std::vector<TokenId>> prompts;
    for (int turn = 0; turn < LongConversation::kTurns; ++turn) {
      prompt = LongConversationPrompt(
          file, prompt, turn > 0 ? want[turn - 1]->ids : std::vector<TokenId>{}, turn);
      prompts.push_back(prompt);
    }
    for (int turn = 0; turn < 2; ++turn) {
      auto got = util::RunOne(
          *scheduler, util::Request(prompts[turn], LongConversation::kGenerated, uint64_t(turn)));
      util::ExpectSameOutput(*got, *want[turn]);
    }
    WaitForDiskWrites(*scheduler);
    daemon.reset();
    daemon = std::make_unique<util::ServiceThread>(socket);
    ASSERT_TRUE(daemon->ok());
    // The first request finds the stage gone (it fails, and the engine reconnects).
    const EngineRequest turn3 = util::Request(prompts[2], LongConversation::kGenerated, 2);
    auto first_try = util::RunOne(*scheduler, turn3);
    if (first_try->finish.reason == FinishReason::kError) {
      EXPECT_EQ(first_try->finish.error.code(), StatusCode::kUnavailable);
      first_try = RunOnceServing(*scheduler, turn3);
    }
    util::ExpectSameOutput(*first_try, *want[2]);
    EXPECT_EQ(first_try->finish.usage.cached_disk_tokens,
              LongConversation::CachedAfter(prompts[1].size()));

    // The daemon dies while turn 4 decodes: turn 4 fails naming the stage; sent again once
    // the daemon is back, it is served from what the disk cache kept.
    WaitForDiskWrites(*scheduler);
    const EngineRequest turn4 = util::Request(prompts[3], LongConversation::kGenerated, 3);
    util::Collector held;
    ASSERT_TRUE(util::SubmitHeld(*scheduler, turn4, held, 8).ok());
    daemon.reset();
    held.release.set_value();
    ASSERT_TRUE(held.Wait());
    EXPECT_EQ(held.finish.reason, FinishReason::kError);
    EXPECT_EQ(held.finish.error.code(), StatusCode::kUnavailable);
    EXPECT_NE(held.finish.error.message().find("stage 1"), std::string::npos)
        << held.finish.error.message();
    daemon = std::make_unique<util::ServiceThread>(socket);
    ASSERT_TRUE(daemon->ok());
    auto again = RunOnceServing(*scheduler, turn4);
    EXPECT_EQ(again->finish.reason, FinishReason::kLength);
    EXPECT_GE(again->finish.usage.cached_disk_tokens,
              LongConversation::CachedAfter(prompts[2].size()));
  }
}

}  // namespace kv_pool_scheduler_test
}  // namespace shardlm
