// The prefix cache on a model with recurrent layers (qwen35-tiny: three gated DeltaNet layers,
// one attention layer). Cached pages resume such a sequence only with its recurrent state at
// their end: a next turn continues from the state its previous turn left at its last whole
// page, skipping those tokens, with bitwise the output of a cold scheduler, in one stage and
// split over two (each stage keeps its own layers' state), also when the second is a shard
// daemon; a prompt that shares pages but no
// kept state is computed from the start, and still answers as cold; an edited turn resumes
// from the state kept when the earlier prompt was prefilled.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "support/temp_dir.h"

namespace shardlm {
namespace recurrent_prefix_cache_test {

using scheduler_test_util::Concat;
using scheduler_test_util::Encode;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::kLongText;
using scheduler_test_util::kPageTokens;
using scheduler_test_util::kQwen35;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunOne;
using scheduler_test_util::StoryTokens;
using testing_util::TempDir;

SchedulerOptions Options(bool prefix_cache, bool split) {
  SchedulerOptions options = scheduler_test_util::TestOptions(2, 256);
  options.prefix_cache = prefix_cache;
  if (split) {
    // Stage 0 holds one DeltaNet layer and no KV at all; stage 1 the rest.
    options.placement.devices.assign(2, DeviceSpec{});
    options.placement.layer_split = {1, 3};
    options.threads = 1;
  }
  return options;
}

// Three turns of one conversation, each continuing the last with its reply: every turn after
// the first skips whole pages and answers as a cold scheduler. `restart`: a new scheduler each
// turn (a restarted server), which finds the pages and the state on its disk tier.
void ConversationCase(const SchedulerOptions& warm_options, bool restart = false) {
  auto cold = MakeScheduler(kQwen35, Options(false, false));
  ASSERT_TRUE(cold);
  std::unique_ptr<Scheduler> warm;
  std::vector<TokenId> history = StoryTokens(kQwen35, 37, kLongText);
  for (int turn = 0; turn < 3; ++turn) {
    SCOPED_TRACE(turn);
    if (!warm || restart) warm = MakeScheduler(kQwen35, warm_options);
    ASSERT_TRUE(warm);
    auto got = RunOne(*warm, Request(history, 20));
    auto want = RunOne(*cold, Request(history, 20));
    ExpectSameOutput(*got, *want);
    if (turn > 0) {
      // The previous turn wrote its prompt and every reply token but the last: its state was
      // kept at the last whole page of that.
      EXPECT_GT(got->finish.usage.cached_tokens, 0);
      EXPECT_EQ(got->finish.usage.cached_tokens % kPageTokens, 0);
      if (restart) {
        EXPECT_EQ(got->finish.usage.cached_disk_tokens, got->finish.usage.cached_tokens);
      }
    }
    history = Concat(Concat(history, got->ids), Encode(kQwen35, " And then?", false));
  }
}

TEST(RecurrentPrefixCacheTest, NextTurnsResumeTheStateAndAnswerAsCold) {
  SHARDLM_REQUIRE_FIXTURES();
  ConversationCase(Options(true, /*split=*/false));
}

TEST(RecurrentPrefixCacheTest, ASplitResumesEachStagesState) {
  SHARDLM_REQUIRE_FIXTURES();
  ConversationCase(Options(true, /*split=*/true));
}

// A shard daemon's stage keeps its layers' state, exports it and imports it over the shard
// protocol.
TEST(RecurrentPrefixCacheTest, ARemoteStageMovesItsStateOverTheProtocol) {
  SHARDLM_REQUIRE_FIXTURES();
  TempDir dir("recurrent_remote");
  const std::string socket = dir.File("stage1.sock");
  scheduler_test_util::ServiceThread daemon(socket);
  ASSERT_TRUE(daemon.ok());
  SchedulerOptions options = scheduler_test_util::WithRemoteStage(Options(true, false), socket);
  options.placement.layer_split = {1, 3};
  ConversationCase(options);
}

// A server restarted between turns, split so that stage 0 holds a DeltaNet layer and no KV
// (its pages hold nothing, its state is a section of its own): each turn resumes from the disk
// tier's pages and state with the cold text.
TEST(RecurrentPrefixCacheTest, ARestartedSplitResumesFromTheDiskTier) {
  SHARDLM_REQUIRE_FIXTURES();
  TempDir dir("recurrent_disk");
  SchedulerOptions options = Options(true, /*split=*/true);
  options.kv_cache_dir = dir.path().string();
  ConversationCase(options, /*restart=*/true);
}

// The exact count: a turn of 37 prompt tokens and 30 generated wrote 66 positions; the state
// passed its last page boundary at 64, so the next turn skips 64.
TEST(RecurrentPrefixCacheTest, ANextTurnSkipsThePreviousTurnsWholePages) {
  SHARDLM_REQUIRE_FIXTURES();
  auto warm = MakeScheduler(kQwen35, Options(true, false));
  ASSERT_TRUE(warm);
  const std::vector<TokenId> turn1 = StoryTokens(kQwen35, 37, kLongText);
  auto reply = RunOne(*warm, Request(turn1, 30));
  ASSERT_EQ(reply->ids.size(), 30u);
  const std::vector<TokenId> turn2 =
      Concat(Concat(turn1, reply->ids), Encode(kQwen35, " Then they went home.", false));
  auto got = RunOne(*warm, Request(turn2, 10));
  const int written = int(turn1.size()) + 30 - 1;
  EXPECT_EQ(got->finish.usage.cached_tokens, written / kPageTokens * kPageTokens);
}

// An edited turn shares the earlier prompt but not its reply: the state kept when that prompt
// was prefilled (at its last whole page) resumes it.
TEST(RecurrentPrefixCacheTest, AnEditedTurnResumesFromThePromptsLastWholePage) {
  SHARDLM_REQUIRE_FIXTURES();
  auto cold = MakeScheduler(kQwen35, Options(false, false));
  auto warm = MakeScheduler(kQwen35, Options(true, false));
  ASSERT_TRUE(cold && warm);
  const std::vector<TokenId> first = StoryTokens(kQwen35, 70, kLongText);
  const std::vector<TokenId> edited = Concat(first, Encode(kQwen35, " Say it again.", false));
  RunOne(*warm, Request(first, 30));  // its reply ends past 96 positions
  auto got = RunOne(*warm, Request(edited, 12));
  auto want = RunOne(*cold, Request(edited, 12));
  EXPECT_EQ(got->finish.usage.cached_tokens, 70 / kPageTokens * kPageTokens);
  ExpectSameOutput(*got, *want);
}

// Pages shared with an earlier request, but no state kept where they end (the earlier one
// went on past them): nothing is skipped, and the answer is the cold one.
TEST(RecurrentPrefixCacheTest, SharedPagesWithoutAKeptStateAreComputed) {
  SHARDLM_REQUIRE_FIXTURES();
  auto cold = MakeScheduler(kQwen35, Options(false, false));
  auto warm = MakeScheduler(kQwen35, Options(true, false));
  ASSERT_TRUE(cold && warm);
  const std::vector<TokenId> first = StoryTokens(kQwen35, 90, kLongText);
  const std::vector<TokenId> second =
      Concat(std::vector<TokenId>(first.begin(), first.begin() + 53),
             Encode(kQwen35, " The cat sat on the mat.", false));
  RunOne(*warm, Request(first, 4));
  auto got = RunOne(*warm, Request(second, 12));
  auto want = RunOne(*cold, Request(second, 12));
  EXPECT_EQ(got->finish.usage.cached_tokens, 0);
  ExpectSameOutput(*got, *want);
}

}  // namespace recurrent_prefix_cache_test
}  // namespace shardlm
