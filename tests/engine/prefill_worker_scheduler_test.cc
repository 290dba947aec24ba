// Prefill worker (a shard daemon of every layer whose pool lies over the engine's own pages):
// prompts of at least disagg_min_tokens uncached tokens prefill there, the others and every
// decode step here, and each request's tokens and logprobs are bitwise those of a colocated
// engine — greedy and seeded, on plain attention (qwen3), windowed layers in rings (gemma3) and
// recurrent layers (qwen35), whose state crosses at the handoff — while the decode stage never
// computes a token of those prompts (its KV is the worker's, read in place). A next turn
// continues its cached prefix on the worker (a recurrent state crosses the other way first). A
// worker that goes away fails only the prompt it held (kUnavailable) while the streams here
// finish; long prompts then prefill here, and go back to the worker once it is up again. A split
// decode side (local stages, or one in a shard daemon) gets each stage's pages from the worker
// the same way, and a decode daemon that comes back has its new pages mapped by the worker.
// Under a bounded pool the worker computes in the frames the engine's pager chose.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"

namespace shardlm {
namespace prefill_worker_scheduler_test {

namespace fs = std::filesystem;
using scheduler_test_util::Collector;
using scheduler_test_util::Concat;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::kLongText;
using scheduler_test_util::kQwen;
using scheduler_test_util::kQwen35;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunOne;
using scheduler_test_util::ServiceThread;
using scheduler_test_util::StoryTokens;
using scheduler_test_util::WithRemoteStage;

constexpr char kGemma3[] = "gemma3-tiny.gguf";
constexpr int kMinTokens = 40;

// `worker`: the worker's socket ("": colocated).
SchedulerOptions Options(const std::string& worker) {
  SchedulerOptions options = scheduler_test_util::TestOptions(3);
  options.threads = 1;
  options.prefill_worker = worker;
  options.disagg_min_tokens = kMinTokens;
  return options;
}

// The decode side in two stages: the second in the shard daemon at `daemon`, or local ("").
SchedulerOptions Split(SchedulerOptions options, const std::string& daemon) {
  if (!daemon.empty()) return WithRemoteStage(std::move(options), daemon);
  options.placement.devices.assign(2, DeviceSpec{});
  return options;
}

std::string Socket(const std::string& test, const std::string& model) {
  return (testing_util::FreshDir("shardlm_prefill_worker", test + "_" + model) / "worker.sock")
      .string();
}

// Decode entries the requests fed back (every sampled token but the last of each).
uint64_t DecodeEntries(const std::vector<std::unique_ptr<Collector>>& results) {
  uint64_t n = 0;
  for (const auto& result : results) n += result->ids.size() - 1;
  return n;
}

// Waits (up to 10 s) until every stage and the worker are up again: the engine reconnects on
// its own.
bool WaitUntilServing(Scheduler& scheduler) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const auto serving = [&] {
    return scheduler.Health().ok() && scheduler.Stats().prefill_worker_up == 1;
  };
  while (!serving() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return serving();
}

// A long prompt no earlier test sent (a cached one has nothing left to compute) prefills on the
// worker and gives the colocated output.
void ExpectANewPromptThroughTheWorker(Scheduler& disaggregated, Scheduler& colocated) {
  const EngineRequest prompt =
      Request(StoryTokens(kQwen, 110, "A cat sat by the window and watched the rain. "), 8);
  auto got = RunOne(disaggregated, prompt);
  EXPECT_TRUE(got->finish.usage.prefill_worker);
  ExpectSameOutput(*got, *RunOne(colocated, prompt));
}

// Submits the requests as one (SubmitAll: admitted in the same step, so none finds a prefix
// another one publishes meanwhile) and waits for all of them.
std::vector<std::unique_ptr<Collector>> RunTogether(Scheduler& scheduler,
                                                    const std::vector<EngineRequest>& requests) {
  std::vector<std::unique_ptr<Collector>> out;
  std::vector<std::pair<EngineRequest, RequestCallbacks>> submitted;
  for (const EngineRequest& request : requests) {
    out.push_back(std::make_unique<Collector>());
    submitted.emplace_back(request, out.back()->Callbacks());
  }
  auto ids = scheduler.SubmitAll(std::move(submitted));
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  if (!ids.ok()) return {};
  for (auto& c : out) EXPECT_TRUE(c->Wait());
  return out;
}

// A worker on a thread and two engines over the fixture `GetParam()`: one colocated, one with
// the worker.
class PrefillWorkerTest : public ::testing::TestWithParam<const char*> {
 protected:
  void Start(const std::string& test) {
    worker_socket_ = Socket(test, GetParam());
    worker_ = std::make_unique<ServiceThread>(worker_socket_);
    ASSERT_TRUE(worker_->ok());
    colocated_ = MakeScheduler(GetParam(), Options(""));
    disaggregated_ = MakeScheduler(GetParam(), Options(worker_socket_));
    ASSERT_TRUE(colocated_ && disaggregated_);
  }
  std::string worker_socket_;
  std::unique_ptr<ServiceThread> worker_;
  std::unique_ptr<Scheduler> colocated_;
  std::unique_ptr<Scheduler> disaggregated_;
};

TEST_P(PrefillWorkerTest, OutputIsBitwiseTheColocatedOutput) {
  const char* model = GetParam();
  ASSERT_NO_FATAL_FAILURE(Start("bitwise"));
  Scheduler& colocated = *colocated_;
  Scheduler& disaggregated = *disaggregated_;
  // Two prompts for the worker (one greedy, one seeded) and a short one that prefills here.
  const std::vector<EngineRequest> requests = {
      Request(StoryTokens(model, 150, kLongText), 12),
      Request(StoryTokens(model, 20, kLongText), 24, /*seed=*/7),
      Request(StoryTokens(model, 97, kLongText), 12, /*seed=*/11)};
  auto want = RunTogether(colocated, requests);
  auto got = RunTogether(disaggregated, requests);
  ASSERT_EQ(got.size(), requests.size());
  ASSERT_EQ(want.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i]->ids.size(), size_t(requests[i].max_tokens));
    ExpectSameOutput(*got[i], *want[i]);
  }
  const EngineStats stats = disaggregated.Stats();
  EXPECT_EQ(stats.prefill_worker_handoffs, 2);
  EXPECT_EQ(stats.prefill_worker_tokens, 150 + 97);
  EXPECT_EQ(stats.prefill_worker_failed_requests, 0);
  EXPECT_EQ(stats.prefill_worker_up, 1);
  // A model with recurrent or windowed layers moves one state per handoff; plain attention none.
  EXPECT_EQ(stats.prefill_worker_state_bytes > 0, std::string(model) != kQwen);
  // The decode stage computed the short prompt and the decode steps, never the long prompts:
  // their KV, which every decode step read, is the worker's.
  EXPECT_EQ(disaggregated.stage_stats()[0].tokens, 20 + DecodeEntries(got));
  EXPECT_EQ(colocated.stage_stats()[0].tokens, 150 + 20 + 97 + DecodeEntries(want));
}

TEST_P(PrefillWorkerTest, ANextTurnContinuesItsCachedPrefixOnTheWorker) {
  const char* model = GetParam();
  ASSERT_NO_FATAL_FAILURE(Start("next_turn"));
  Scheduler& colocated = *colocated_;
  Scheduler& disaggregated = *disaggregated_;
  const std::vector<TokenId> turn1 = StoryTokens(model, 90, kLongText);
  auto reply1 = RunOne(colocated, Request(turn1, 8));
  ExpectSameOutput(*RunOne(disaggregated, Request(turn1, 8)), *reply1);
  // The next turn: the conversation so far and 60 more tokens.
  const std::vector<TokenId> turn2 =
      Concat(Concat(turn1, reply1->ids), StoryTokens(model, 61, kLongText));
  auto want = RunOne(colocated, Request(turn2, 10, /*seed=*/5));
  auto got = RunOne(disaggregated, Request(turn2, 10, /*seed=*/5));
  ExpectSameOutput(*got, *want);
  EXPECT_GT(got->finish.usage.cached_tokens, 0);
  EXPECT_EQ(got->finish.usage.cached_tokens, want->finish.usage.cached_tokens);
  EXPECT_TRUE(got->finish.usage.prefill_worker);
  EXPECT_EQ(disaggregated.Stats().prefill_worker_handoffs, 2);
}

// A split decode side: two stages, the second local or in a shard daemon. The worker lays each
// stage's layers over that stage's own pages (the daemon shares its region with the server,
// which hands it on), so each stage decodes from the KV the worker wrote.
TEST_P(PrefillWorkerTest, ASplitDecodeSideReadsEachStagesPagesFromTheWorker) {
  const char* model = GetParam();
  ASSERT_NO_FATAL_FAILURE(Start("split"));
  const std::string daemon_socket = Socket("split_daemon", model);
  ServiceThread daemon(daemon_socket);
  ASSERT_TRUE(daemon.ok());
  const std::vector<EngineRequest> requests = {
      Request(StoryTokens(model, 130, kLongText), 10),
      Request(StoryTokens(model, 20, kLongText), 16, /*seed=*/3),
      Request(StoryTokens(model, 90, kLongText), 10, /*seed=*/9)};
  auto want = RunTogether(*colocated_, requests);
  disaggregated_.reset();  // a worker serves one engine at a time
  for (const bool remote : {false, true}) {
    SCOPED_TRACE(remote ? "second stage in a daemon" : "two local stages");
    auto split = MakeScheduler(model, Split(Options(worker_socket_), remote ? daemon_socket : ""));
    ASSERT_TRUE(split);
    auto got = RunTogether(*split, requests);
    ASSERT_EQ(got.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      SCOPED_TRACE(i);
      ExpectSameOutput(*got[i], *want[i]);
    }
    EXPECT_EQ(split->Stats().prefill_worker_handoffs, 2);
    EXPECT_EQ(split->Stats().prefill_worker_tokens, 130 + 90);
    for (const StageStats& stage : split->stage_stats()) {
      EXPECT_EQ(stage.tokens, 20 + DecodeEntries(got));
    }
  }
}

// `options` with a bounded pool of 6 pages of 16 positions a sequence (a sink of one page, a
// tail of two, a reselection every 8 tokens), the pages outside it in each stage's tier.
SchedulerOptions Bounded(SchedulerOptions options, PageSelect select) {
  options.n_ctx = 512;
  options.kv_pool.pool_tokens = 96;
  options.kv_pool.sink_tokens = 16;
  options.kv_pool.tail_tokens = 32;
  options.kv_pool.reselect_tokens = 8;
  options.kv_pool.select = select;
  return options;
}

// Under a bounded pool a prompt past the pool prefills on the worker through the frames the
// pager chose (the decode stages page in and out for it first), the worker summarizes the keys it
// writes and scores the pages at the prompt's end, and decoding goes on here from there: bitwise
// the colocated bounded engine's output, on one decode stage or a split one (local or with a
// daemon), with either page selection, and a next turn continues its cached pages and their
// recorded selection on the worker. Each long prompt runs alone on both engines (a bounded
// prompt's chunks decide what it attends, and a colocated prompt beside others is chunked by
// what they leave it); a short one decodes here beside the first.
TEST_P(PrefillWorkerTest, UnderABoundedPoolTheWorkerComputesInTheFramesThePagerChose) {
  const char* model = GetParam();
  ASSERT_NO_FATAL_FAILURE(Start("bounded"));
  disaggregated_.reset();  // a worker serves one engine at a time
  const std::string daemon_socket = Socket("bounded_daemon", model);
  ServiceThread daemon(daemon_socket);
  ASSERT_TRUE(daemon.ok());
  const EngineRequest first = Request(StoryTokens(model, 300, kLongText), 24);
  const EngineRequest beside =
      Request(StoryTokens(model, 20, "A cat sat by the window and watched the rain. "), 40, 3);
  const EngineRequest second =
      Request(StoryTokens(model, 200, "The river ran past the mill all night long. "), 24, 9);
  struct Case {
    PageSelect select;
    const char* daemon;  // null: one decode stage; "": two local ones
  };
  for (const Case& c : {Case{PageSelect::kQk, nullptr}, Case{PageSelect::kLru, nullptr},
                        Case{PageSelect::kQk, ""}, Case{PageSelect::kQk, daemon_socket.c_str()}}) {
    SCOPED_TRACE(fmt::format("{}, {}", PageSelectName(c.select),
                             c.daemon == nullptr ? "one decode stage"
                             : *c.daemon == '\0' ? "two local decode stages"
                                                 : "the second decode stage in a daemon"));
    SchedulerOptions colocated_options = Bounded(Options(""), c.select);
    SchedulerOptions worker_options = Bounded(Options(worker_socket_), c.select);
    if (c.daemon != nullptr) worker_options = Split(std::move(worker_options), c.daemon);
    auto colocated = MakeScheduler(model, colocated_options);
    auto disaggregated = MakeScheduler(model, worker_options);
    ASSERT_TRUE(colocated && disaggregated);
    std::vector<std::unique_ptr<Collector>> want;
    for (const EngineRequest& request : {first, beside, second}) {
      want.push_back(RunOne(*colocated, request));
    }
    auto got = RunTogether(*disaggregated, {first, beside});
    got.push_back(RunOne(*disaggregated, second));
    ASSERT_EQ(got.size(), 3u);
    // The first conversation's next turn: its cached pages and their recorded selection, then
    // 60 more tokens on the worker.
    const EngineRequest next = Request(
        Concat(Concat(first.prompt, want[0]->ids), StoryTokens(model, 60, kLongText)), 16, 5);
    want.push_back(RunOne(*colocated, next));
    got.push_back(RunOne(*disaggregated, next));
    EXPECT_GT(got.back()->finish.usage.cached_tokens, 0);
    EXPECT_EQ(got.back()->finish.usage.cached_tokens, want.back()->finish.usage.cached_tokens);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(i);
      ExpectSameOutput(*got[i], *want[i]);
      EXPECT_EQ(got[i]->finish.usage.prefill_worker, i != 1);
    }
    const EngineStats stats = disaggregated->Stats();
    EXPECT_EQ(stats.prefill_worker_handoffs, 3);
    EXPECT_EQ(stats.prefill_worker_tokens,
              300 + 200 + int64_t(next.prompt.size()) - got.back()->finish.usage.cached_tokens);
    EXPECT_GT(stats.kv_pool_pages_evicted, 0);
    uint64_t page_outs = 0;
    for (const StageStats& stage : disaggregated->stage_stats()) {
      // Only the short prompt and the decode steps were computed here ...
      EXPECT_EQ(stage.tokens, 20 + DecodeEntries(got));
      page_outs += stage.paging.page_outs;
    }
    // ... and the pages the worker wrote went to the tier when they left the pool.
    EXPECT_GT(page_outs, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PrefillWorkerTest, ::testing::Values(kQwen, kGemma3, kQwen35),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('-'));
                         });

TEST(PrefillWorkerFaultTest, ALostWorkerFailsOnlyThePromptItHeld) {
  const std::string socket = Socket("lost", kQwen);
  // Each worker batch takes a while: the long prompt is on the worker when it goes away.
  auto worker = std::make_unique<ServiceThread>(socket, std::chrono::milliseconds(400));
  ASSERT_TRUE(worker->ok());
  auto colocated = MakeScheduler(kQwen, Options(""));
  auto disaggregated = MakeScheduler(kQwen, Options(socket));
  ASSERT_TRUE(colocated && disaggregated);
  const EngineRequest stream = Request(StoryTokens(kQwen, 20, kLongText), 48);
  const EngineRequest long_prompt = Request(StoryTokens(kQwen, 120, kLongText), 8);

  Collector on_worker;
  Collector beside;
  ASSERT_TRUE(disaggregated->Submit(long_prompt, on_worker.Callbacks()).ok());
  ASSERT_TRUE(disaggregated->Submit(stream, beside.Callbacks()).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  worker.reset();  // the worker goes away under the prompt's first batch
  ASSERT_TRUE(on_worker.Wait());
  ASSERT_TRUE(beside.Wait());
  EXPECT_EQ(on_worker.finish.reason, FinishReason::kError);
  EXPECT_EQ(on_worker.finish.error.code(), StatusCode::kUnavailable)
      << on_worker.finish.error.message();
  EXPECT_NE(on_worker.finish.error.message().find("prefill worker"), std::string::npos);
  ExpectSameOutput(beside, *RunOne(*colocated, stream));
  EngineStats stats = disaggregated->Stats();
  EXPECT_EQ(stats.prefill_worker_failed_requests, 1);
  EXPECT_EQ(stats.prefill_worker_up, 0);
  EXPECT_TRUE(disaggregated->Health().ok());

  // Meanwhile long prompts prefill here, the same tokens.
  auto here = RunOne(*disaggregated, long_prompt);
  EXPECT_FALSE(here->finish.usage.prefill_worker);
  ExpectSameOutput(*here, *RunOne(*colocated, long_prompt));

  // Back: the engine reconnects on its own, and long prompts go to the worker again.
  worker = std::make_unique<ServiceThread>(socket);
  ASSERT_TRUE(worker->ok());
  ASSERT_TRUE(WaitUntilServing(*disaggregated));
  ExpectANewPromptThroughTheWorker(*disaggregated, *colocated);
  EXPECT_EQ(disaggregated->Stats().prefill_worker_handoffs, 1);

  // A worker that dies while idle is found out before the next prompt is sent to it.
  worker.reset();
  const EngineRequest third_prompt =
      Request(StoryTokens(kQwen, 100, "Tom built a boat from old wood and sailed it. "), 8);
  auto after_idle_loss = RunOne(*disaggregated, third_prompt);
  EXPECT_EQ(after_idle_loss->finish.reason, FinishReason::kLength);
  EXPECT_FALSE(after_idle_loss->finish.usage.prefill_worker);
  EXPECT_EQ(disaggregated->Stats().prefill_worker_failed_requests, 1);
}

// A decode daemon that comes back keeps its pages in a new region: the worker's session ends and
// it reconnects over that one (were it still writing the old region, the next prompt's output
// would be wrong).
TEST(PrefillWorkerFaultTest, TheWorkerMapsADecodeDaemonsNewPagesAfterItCameBack) {
  const std::string socket = Socket("remap", kQwen);
  const std::string daemon_socket = Socket("remap_daemon", kQwen);
  ServiceThread worker(socket);
  auto daemon = std::make_unique<ServiceThread>(daemon_socket);
  ASSERT_TRUE(worker.ok() && daemon->ok());
  auto colocated = MakeScheduler(kQwen, Options(""));
  auto split = MakeScheduler(kQwen, Split(Options(socket), daemon_socket));
  ASSERT_TRUE(colocated && split);
  const EngineRequest first = Request(StoryTokens(kQwen, 100, kLongText), 8);
  ExpectSameOutput(*RunOne(*split, first), *RunOne(*colocated, first));

  daemon.reset();  // the decode daemon goes away: the next request finds it gone
  EXPECT_EQ(RunOne(*split, Request(StoryTokens(kQwen, 12, kLongText), 4))->finish.reason,
            FinishReason::kError);
  daemon = std::make_unique<ServiceThread>(daemon_socket);
  ASSERT_TRUE(daemon->ok());
  ASSERT_TRUE(WaitUntilServing(*split));
  ExpectANewPromptThroughTheWorker(*split, *colocated);
}

TEST(PrefillWorkerFaultTest, AnUnreachableWorkerIsRefused) {
  const LoadedModel& loaded = testing_util::Fixture(kQwen);
  if (!loaded.model) return;
  SchedulerOptions nobody = Options(Socket("nobody", kQwen));
  nobody.placement.model_path = testing::FixturePath(kQwen);
  auto unreachable = Scheduler::Create(*loaded.model, *loaded.tokenizer, nobody);
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable)
      << unreachable.status().message();
}

}  // namespace prefill_worker_scheduler_test
}  // namespace shardlm
