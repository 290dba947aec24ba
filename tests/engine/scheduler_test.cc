// Scheduler end to end on the fixture models: greedy output of a batched request equals
// its one-slot run's and the fixtures' (llama.cpp) over the safe prefix, concurrency and prompt
// chunking never change a request's tokens (greedy and seeded), stop strings cut the text exactly,
// max_tokens and the context give kLength, usage counts, cancellation frees KV pages, Submit
// errors; with the layers split into 2 or 3 pipelined stages, requests get bitwise the unsplit
// tokens and logprobs while batches overlap in the stages (local stages, and a local stage + a
// shard daemon), and a lost stage fails the running requests (kError, kUnavailable), is reported by
// Health and Submit, and serving resumes after the engine reconnects it.
#include "engine/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/scheduler_test_util.h"
#include "pipeline/fake_stage.h"
#include "pipeline/model_loader.h"
#include "pipeline/stage_factory.h"
#include "shard/shard_service.h"
#include "support/fixtures.h"

namespace shardlm {
namespace scheduler_test {

using nlohmann::json;
using scheduler_test_util::Collector;
using scheduler_test_util::Encode;
using scheduler_test_util::Fixture;
using scheduler_test_util::Greedy;
using scheduler_test_util::kStories;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunAll;
using scheduler_test_util::ServiceThread;
using testing::FixturePath;

SchedulerOptions Options(int n_parallel, int n_ctx = 256, int n_batch = 64) {
  return scheduler_test_util::TestOptions(n_parallel, n_ctx, n_batch);
}

SamplingParams Seeded(uint64_t seed) { return scheduler_test_util::WholeDistribution(1.2f, seed); }

const char kPrompt[] = "Once upon a time, there was a little dog named Max. He liked";

// A request among others, its prompt in chunks of 5, gives what it gives alone in one slot
// with its prompt in one batch (`shardlm run`): tokens, text, logprobs bitwise, usage.
TEST(SchedulerTest, GreedyBatchedEqualsOneSlotRun) {
  SHARDLM_REQUIRE_FIXTURES();
  SamplingParams sampling = Greedy();
  sampling.n_logprobs = 2;
  EngineRequest request = Request(Encode(kStories, kPrompt, true), sampling, 40, false);
  request.want_logprobs = true;
  SchedulerOptions one_slot = Options(1, 256, 512);
  one_slot.prefix_cache = false;
  auto run = MakeScheduler(kStories, one_slot);
  ASSERT_TRUE(run);
  auto want = RunAll(*run, {request});
  ASSERT_FALSE(want[0]->ids.empty());

  auto scheduler = MakeScheduler(kStories, Options(2, 256, 5));  // prompt in chunks of 5
  ASSERT_TRUE(scheduler);
  EngineRequest other = Request(Encode(kStories, "The cat sat", true), Seeded(3), 40, true);
  auto got = RunAll(*scheduler, {request, other});
  EXPECT_EQ(got[0]->logprobs, want[0]->logprobs);  // bitwise
  EXPECT_EQ(got[0]->text, want[0]->text);
  EXPECT_EQ(got[0]->ids, want[0]->ids);
  EXPECT_EQ(got[0]->finish.reason, want[0]->finish.reason);
  EXPECT_EQ(got[0]->finish.usage.completion_tokens, want[0]->finish.usage.completion_tokens);
  EXPECT_EQ(got[0]->finish.usage.prompt_tokens, int(request.prompt.size()));
}

TEST(SchedulerTest, GreedyMatchesGoldenOverSafePrefixWhileBatched) {
  SHARDLM_REQUIRE_FIXTURES();
  std::map<std::string, std::vector<json>> by_model;
  for (const json& entry : testing::RunnableGoldenEntries()) {
    if (entry["greedy_safe_prefix"].get<int>() >= 4) by_model[entry["model"]].push_back(entry);
  }
  ASSERT_FALSE(by_model.empty());
  for (const auto& [model, entries] : by_model) {
    SCOPED_TRACE(model);
    auto scheduler = MakeScheduler(model, Options(3, 128, 16));
    ASSERT_TRUE(scheduler);
    std::vector<EngineRequest> requests;
    for (const json& entry : entries) {
      requests.push_back(
          Request(entry["prompt_ids"].get<std::vector<TokenId>>(), Greedy(), 32, true));
    }
    auto got = RunAll(*scheduler, requests);
    for (size_t e = 0; e < entries.size(); ++e) {
      SCOPED_TRACE(entries[e]["id"].get<std::string>());
      const auto want = entries[e]["greedy_ids"].get<std::vector<TokenId>>();
      const int safe = entries[e]["greedy_safe_prefix"];
      ASSERT_EQ(got[e]->ids.size(), 32u);
      EXPECT_EQ(got[e]->finish.reason, FinishReason::kLength);
      for (int t = 0; t < safe; ++t) ASSERT_EQ(got[e]->ids[t], want[t]) << "step " << t;
    }
  }
}

TEST(SchedulerTest, EightConcurrentRequestsEqualOneAlone) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<TokenId> prompt = Encode(kStories, kPrompt, true);
  for (const SamplingParams& sampling : {Greedy(), Seeded(42)}) {
    auto single = MakeScheduler(kStories, Options(1, 256, 512));
    ASSERT_TRUE(single);
    auto alone = RunAll(*single, {Request(prompt, sampling, 48)});
    ASSERT_EQ(alone[0]->ids.size(), 48u);

    // Small batches: prefill chunks of new requests share steps with running decodes.
    auto batched = MakeScheduler(kStories, Options(8, 256, 12));
    ASSERT_TRUE(batched);
    std::vector<std::unique_ptr<Collector>> collectors;
    for (int i = 0; i < 8; ++i) {
      collectors.push_back(std::make_unique<Collector>());
      ASSERT_TRUE(
          batched->Submit(Request(prompt, sampling, 48), collectors.back()->Callbacks()).ok());
      if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // staggered
    }
    for (auto& c : collectors) {
      ASSERT_TRUE(c->Wait());
      EXPECT_EQ(c->ids, alone[0]->ids);
      EXPECT_EQ(c->text, alone[0]->text);
      EXPECT_EQ(c->finish.reason, FinishReason::kLength);
    }
  }
}

TEST(SchedulerTest, LongPromptDoesNotStallRunningStream) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options(2, 512, 16));
  ASSERT_TRUE(scheduler);
  Collector running;
  auto running_id = scheduler->Submit(Request(Encode(kStories, kPrompt, true), Greedy(), 400),
                                      running.Callbacks());
  ASSERT_TRUE(running_id.ok());
  auto running_tokens = [&] {
    std::lock_guard<std::mutex> lock(running.mu);
    return running.ids.size();
  };
  while (running_tokens() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  std::vector<TokenId> long_prompt;
  while (long_prompt.size() < 200) {
    for (TokenId id : Encode(kStories, kPrompt, true)) long_prompt.push_back(id);
  }
  long_prompt.resize(200);
  const size_t before = running_tokens();
  size_t at_first_token = 0;
  Collector late;
  RequestCallbacks callbacks = late.Callbacks();
  auto on_token = callbacks.on_token;
  callbacks.on_token = [&](const TokenEvent& event) {
    if (at_first_token == 0) at_first_token = running_tokens();
    return on_token(event);
  };
  ASSERT_TRUE(scheduler->Submit(Request(long_prompt, Greedy(), 2), callbacks).ok());
  ASSERT_TRUE(late.Wait());
  // 200 prompt tokens in chunks of at most 15 (16 minus the running decode): >= 14 steps,
  // each of which also decoded a token of the running stream. The running token of the
  // step that gives the late request its first token may be delivered after it (the order
  // of callbacks within a step is not defined; seen once under ASan), so 13 are certain.
  EXPECT_GE(at_first_token - before, 13u);
  scheduler->Cancel(*running_id);
  ASSERT_TRUE(running.Wait());
}

TEST(SchedulerTest, PrefillChunkCapKeepsOutput) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<TokenId> prompt = Encode(kStories, kPrompt, true);
  auto single = MakeScheduler(kStories, Options(1));
  ASSERT_TRUE(single);
  auto alone = RunAll(*single, {Request(prompt, Greedy(), 24)});
  SchedulerOptions options = Options(3, 256, 64);
  options.prefill_chunk = 3;
  auto scheduler = MakeScheduler(kStories, options);
  ASSERT_TRUE(scheduler);
  // The first streams while the others prefill 3 tokens per step beside it.
  Collector first;
  ASSERT_TRUE(scheduler->Submit(Request(prompt, Greedy(), 24), first.Callbacks()).ok());
  for (;;) {
    std::lock_guard<std::mutex> lock(first.mu);
    if (!first.ids.empty()) break;
  }
  auto got = RunAll(*scheduler, {Request(prompt, Greedy(), 24), Request(prompt, Greedy(), 24)});
  ASSERT_TRUE(first.Wait());
  EXPECT_EQ(first.ids, alone[0]->ids);
  for (const auto& c : got) EXPECT_EQ(c->ids, alone[0]->ids);
  options.prefill_chunk = -1;
  EXPECT_FALSE(options.Validate().ok());
}

TEST(SchedulerTest, SeededSamplingIgnoresNeighbours) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options(4, 256, 8));
  ASSERT_TRUE(scheduler);
  const EngineRequest target = Request(Encode(kStories, "The cat sat", true), Seeded(7), 30);
  auto alone = RunAll(*scheduler, {target});
  auto crowd =
      RunAll(*scheduler, {Request(Encode(kStories, kPrompt, true), Seeded(1), 40), target,
                          Request(Encode(kStories, "Lily", true), Seeded(2), 20),
                          Request(Encode(kStories, "A big red ball", true), Greedy(), 25)});
  EXPECT_EQ(crowd[1]->ids, alone[0]->ids);
  EXPECT_EQ(crowd[1]->text, alone[0]->text);
  auto other_seed = RunAll(*scheduler, {Request(target.prompt, Seeded(8), 30)});
  EXPECT_NE(other_seed[0]->ids, alone[0]->ids);
}

TEST(SchedulerTest, StopStringsCutTextExactly) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options(2));
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> prompt = Encode(kStories, kPrompt, true);
  auto full = RunAll(*scheduler, {Request(prompt, Greedy(), 40)});
  const std::string text = full[0]->text;
  ASSERT_GE(text.size(), 20u);
  // A stop string spanning a token boundary: the end of piece 3 and the start of piece 4.
  const Tokenizer& tok = *Fixture(kStories).tokenizer;
  size_t boundary = 0;
  for (int t = 0; t < 4; ++t) boundary += tok.Piece(full[0]->ids[t]).size();
  const std::string stop = text.substr(boundary - 2, 4);
  const std::string want = text.substr(0, text.find(stop));

  EngineRequest request = Request(prompt, Greedy(), 40);
  request.stop = {"never appears in this text", stop};
  auto got = RunAll(*scheduler, {request});
  EXPECT_EQ(got[0]->finish.reason, FinishReason::kStop);
  EXPECT_EQ(got[0]->text, want);
  EXPECT_EQ(got[0]->finish.text, "");
  EXPECT_EQ(got[0]->finish.stop_sequence, stop);
  EXPECT_EQ(full[0]->finish.stop_sequence, "");
  EXPECT_EQ(scheduler->Stats().kv_pages_used, 0);
}

TEST(SchedulerTest, MaxTokensContextAndUsage) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options(2, 24, 8));
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> prompt = Encode(kStories, "Once upon a time", true);
  auto limited = RunAll(*scheduler, {Request(prompt, Greedy(), 5)});
  EXPECT_EQ(limited[0]->finish.reason, FinishReason::kLength);
  EXPECT_EQ(limited[0]->finish.usage.completion_tokens, 5);
  EXPECT_EQ(limited[0]->finish.usage.prompt_tokens, int(prompt.size()));
  EXPECT_EQ(limited[0]->ids.size(), 5u);

  // No max_tokens: the context (24 positions) ends it, after as many tokens as run gives.
  auto until_full = RunAll(*scheduler, {Request(prompt, Greedy(), -1)});
  EXPECT_EQ(until_full[0]->finish.reason, FinishReason::kLength);
  EXPECT_EQ(until_full[0]->finish.usage.completion_tokens, 24 - int(prompt.size()) + 1);

  auto none = RunAll(*scheduler, {Request(prompt, Greedy(), 0)});
  EXPECT_EQ(none[0]->finish.reason, FinishReason::kLength);
  EXPECT_EQ(none[0]->finish.usage.completion_tokens, 0);

  const EngineStats stats = scheduler->Stats();
  EXPECT_EQ(stats.requests_total, 3);
  EXPECT_EQ(stats.prompt_tokens_total, 3 * int64_t(prompt.size()));
  EXPECT_EQ(stats.generated_tokens_total, 5 + 24 - int64_t(prompt.size()) + 1);
  EXPECT_EQ(stats.slots_busy, 0);
  EXPECT_EQ(stats.kv_pages_used, 0);
}

TEST(SchedulerTest, CancellationFreesPages) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options(2, 512, 64));
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> prompt = Encode(kStories, kPrompt, true);
  // The client goes away: on_token returns false.
  Collector gone;
  gone.cancel_after = 3;
  ASSERT_TRUE(scheduler->Submit(Request(prompt, Greedy(), -1), gone.Callbacks()).ok());
  // Cancel() from another thread while it streams.
  Collector cancelled;
  auto id = scheduler->Submit(Request(prompt, Greedy(), -1), cancelled.Callbacks());
  ASSERT_TRUE(id.ok());
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(cancelled.mu);
      if (cancelled.ids.size() >= 2 || cancelled.done) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(scheduler->Stats().kv_pages_used, 0);
  scheduler->Cancel(*id);
  scheduler->Cancel(*id);  // idempotent
  ASSERT_TRUE(gone.Wait());
  ASSERT_TRUE(cancelled.Wait());
  EXPECT_EQ(gone.finish.reason, FinishReason::kCancelled);
  EXPECT_EQ(gone.ids.size(), 3u);
  EXPECT_EQ(cancelled.finish.reason, FinishReason::kCancelled);
  EXPECT_EQ(scheduler->Stats().kv_pages_used, 0);
  EXPECT_EQ(scheduler->Stats().slots_busy, 0);
}

TEST(SchedulerTest, SubmitErrors) {
  SHARDLM_REQUIRE_FIXTURES();
  SchedulerOptions options = Options(1, 32, 8);
  options.max_queue = 1;
  auto scheduler = MakeScheduler(kStories, options);
  ASSERT_TRUE(scheduler);
  const std::vector<TokenId> prompt = Encode(kStories, "Once upon a time", true);

  auto empty = scheduler->Submit(Request({}, Greedy(), 4), {});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto too_long = scheduler->Submit(Request(std::vector<TokenId>(32, prompt[1]), Greedy(), 4), {});
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("context_length_exceeded"), std::string::npos);
  auto bad_id = scheduler->Submit(Request({1, 100000}, Greedy(), 4), {});
  EXPECT_EQ(bad_id.status().code(), StatusCode::kInvalidArgument);

  // One slot + one queue place: the third concurrent request is refused. The running
  // request's first token waits for `release`, so it cannot finish (a 32-token context
  // fills in milliseconds) and free its slot before the third Submit.
  Collector running, queued;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  RequestCallbacks held = running.Callbacks();
  held.on_token = [on_token = held.on_token, released](const TokenEvent& event) {
    released.wait();
    return on_token(event);
  };
  auto a = scheduler->Submit(Request(prompt, Greedy(), -1), held);
  auto b = scheduler->Submit(Request(prompt, Greedy(), -1), queued.Callbacks());
  ASSERT_TRUE(a.ok() && b.ok());
  auto full = scheduler->Submit(Request(prompt, Greedy(), 4), {});
  scheduler->Cancel(*b);
  release.set_value();
  scheduler->Cancel(*a);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(full.status().message().find("queue full (1 waiting)"), std::string::npos)
      << full.status().message();
  ASSERT_TRUE(running.Wait() && queued.Wait());
  EXPECT_EQ(queued.finish.reason, FinishReason::kCancelled);
  EXPECT_EQ(queued.finish.usage.completion_tokens, 0);
  EXPECT_EQ(scheduler->Stats().queue_length, 0);
}

TEST(SchedulerTest, DestructionFinishesOutstandingRequests) {
  SHARDLM_REQUIRE_FIXTURES();
  Collector running, queued;
  {
    auto scheduler = MakeScheduler(kStories, Options(1, 512, 64));
    ASSERT_TRUE(scheduler);
    const std::vector<TokenId> prompt = Encode(kStories, kPrompt, true);
    ASSERT_TRUE(scheduler->Submit(Request(prompt, Greedy(), -1), running.Callbacks()).ok());
    ASSERT_TRUE(scheduler->Submit(Request(prompt, Greedy(), -1), queued.Callbacks()).ok());
    EXPECT_EQ(scheduler->info().n_parallel, 1);
    EXPECT_EQ(scheduler->info().architecture, "llama");
    EXPECT_TRUE(scheduler->Health().ok());
  }
  ASSERT_TRUE(running.Wait(1) && queued.Wait(1));
  EXPECT_EQ(running.finish.reason, FinishReason::kCancelled);
  EXPECT_EQ(queued.finish.reason, FinishReason::kCancelled);
}

// ---- Layer split: pipelined batches, split invariance, a lost stage ----

// n unpinned cpu stages with the given weights, one compute thread each.
SchedulerOptions SplitOptions(int n_parallel, int n_stages, std::vector<double> weights) {
  SchedulerOptions options = Options(n_parallel, 256, 64);
  options.placement.devices.assign(n_stages, DeviceSpec{});
  options.placement.layer_split = std::move(weights);
  options.threads = 1;
  return options;
}

std::vector<EngineRequest> MixedRequests(const std::string& file) {
  const char* prompts[] = {"Once upon a time, there was a little dog named Max. He liked",
                           "The cat sat on the mat", "Lily and Ben went to the park to play",
                           "One day"};
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 4; ++i) {
    EngineRequest request =
        Request(Encode(file, prompts[i], true), i % 2 ? Seeded(100 + i) : Greedy(), 20 + 4 * i);
    request.want_logprobs = true;
    requests.push_back(std::move(request));
  }
  return requests;
}

TEST(SchedulerSplitTest, PipelinedSplitsGiveTheUnsplitTokensAndLogprobs) {
  SHARDLM_REQUIRE_FIXTURES();
  struct Case {
    const char* file;
    int n_stages;
    std::vector<double> weights;
  };
  const Case cases[] = {
      {kStories, 2, {1, 1}}, {kStories, 3, {1, 3, 1}}, {"qwen3-tiny-f32.gguf", 2, {0.4, 0.6}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{}: {} stages", c.file, c.n_stages));
    const std::vector<EngineRequest> requests = MixedRequests(c.file);
    auto unsplit = MakeScheduler(c.file, Options(4, 256, 64));
    ASSERT_TRUE(unsplit);
    auto want = RunAll(*unsplit, requests);
    EXPECT_EQ(unsplit->pipeline_counters().max_in_flight, 1);

    auto split = MakeScheduler(c.file, SplitOptions(4, c.n_stages, c.weights));
    ASSERT_TRUE(split);
    EXPECT_EQ(split->info().stages.size(), size_t(c.n_stages));
    auto got = RunAll(*split, requests);
    for (size_t r = 0; r < requests.size(); ++r) {
      SCOPED_TRACE(r);
      EXPECT_EQ(got[r]->finish.reason, FinishReason::kLength);
      EXPECT_EQ(got[r]->ids, want[r]->ids);
      EXPECT_EQ(got[r]->logprobs, want[r]->logprobs);  // bitwise
      EXPECT_EQ(got[r]->text, want[r]->text);
    }
    // Several batches were in the stages at once: a pipeline, not a relay.
    EXPECT_GT(split->pipeline_counters().max_in_flight, 1);
    EXPECT_EQ(split->Stats().kv_pages_used, 0);
  }
}

TEST(SchedulerSplitTest, PromptChunksFollowEachOtherThroughTheStages) {
  SHARDLM_REQUIRE_FIXTURES();
  // One request alone: only its prompt chunks (8 tokens each) can overlap in the stages.
  const std::vector<TokenId> prompt = Encode(kStories, std::string(kPrompt) + " " + kPrompt, true);
  ASSERT_GT(prompt.size(), 24u);
  SchedulerOptions unsplit_options = Options(1, 256, 8);
  auto unsplit = MakeScheduler(kStories, unsplit_options);
  ASSERT_TRUE(unsplit);
  auto want = RunAll(*unsplit, {Request(prompt, Greedy(), 16)});

  SchedulerOptions split_options = SplitOptions(1, 2, {1, 1});
  split_options.n_batch = 8;
  auto split = MakeScheduler(kStories, split_options);
  ASSERT_TRUE(split);
  auto got = RunAll(*split, {Request(prompt, Greedy(), 16)});
  EXPECT_EQ(got[0]->ids, want[0]->ids);
  EXPECT_EQ(split->pipeline_counters().max_in_flight, 2);
}

TEST(SchedulerSplitTest, LocalPlusRemoteStageGivesTheUnsplitTokens) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string socket_path = (std::filesystem::temp_directory_path() /
                                   ("shardlm_sched_" + std::to_string(::getpid()) + ".sock"))
                                      .string();
  ServiceThread daemon(socket_path);
  ASSERT_TRUE(daemon.ok());

  const std::vector<EngineRequest> requests = MixedRequests(kStories);
  auto unsplit = MakeScheduler(kStories, Options(4, 256, 64));
  ASSERT_TRUE(unsplit);
  auto want = RunAll(*unsplit, requests);

  SchedulerOptions options = SplitOptions(4, 2, {0.4, 0.6});
  options.placement.devices[1].kind = DeviceSpec::Kind::kUnix;
  options.placement.devices[1].socket_path = socket_path;
  options.placement.model_path = FixturePath(kStories);
  auto split = MakeScheduler(kStories, options);
  ASSERT_TRUE(split);
  ASSERT_EQ(split->info().stages.size(), 2u);
  EXPECT_TRUE(split->info().stages[1].remote);
  auto got = RunAll(*split, requests);
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ(got[r]->ids, want[r]->ids) << r;
    EXPECT_EQ(got[r]->logprobs, want[r]->logprobs) << r;  // bitwise
  }
  EXPECT_GT(split->pipeline_counters().max_in_flight, 1);
}

TEST(SchedulerSplitTest, ALostStageFailsRequestsAndServingResumesAfterReconnect) {
  SHARDLM_REQUIRE_FIXTURES();
  const LoadedModel& loaded = Fixture(kStories);
  ASSERT_TRUE(loaded.model);
  const SchedulerOptions options = SplitOptions(2, 2, {1, 1});
  scheduler_test_util::FaultySplit split =
      scheduler_test_util::SchedulerWithFaultyStage1(loaded, options);
  ASSERT_TRUE(split.scheduler);
  testing::FaultyStage* faulty = split.faulty;
  Scheduler& scheduler = *split.scheduler;

  // The stage dies mid-stream (after 8 batches) and cannot come back yet.
  faulty->set_can_reconnect(false);
  faulty->FailAfter(8);
  const std::vector<TokenId> prompt = Encode(kStories, kPrompt, true);
  auto failed = RunAll(scheduler, {Request(prompt, Greedy(), 100), Request(prompt, Greedy(), 100)});
  for (const auto& c : failed) {
    EXPECT_EQ(c->finish.reason, FinishReason::kError);
    EXPECT_EQ(c->finish.error.code(), StatusCode::kUnavailable);
    EXPECT_NE(c->finish.error.message().find("stage 1"), std::string::npos)
        << c->finish.error.message();
    EXPECT_LT(c->ids.size(), 100u);
  }
  EXPECT_EQ(scheduler.Stats().kv_pages_used, 0);
  EXPECT_EQ(scheduler.Health().code(), StatusCode::kUnavailable);
  Collector refused;
  auto id = scheduler.Submit(Request(prompt, Greedy(), 4), refused.Callbacks());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(id.status().message().find("stage 1"), std::string::npos) << id.status().message();

  // Reconnect attempts fail while the stage stays away; then it comes back.
  std::this_thread::sleep_for(kReconnectInterval * 2);
  EXPECT_EQ(scheduler.Health().code(), StatusCode::kUnavailable);
  faulty->set_can_reconnect(true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!scheduler.Health().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(scheduler.Health().ok()) << scheduler.Health().message();
  auto unsplit = MakeScheduler(kStories, Options(2, 256, 64));
  ASSERT_TRUE(unsplit);
  auto want = RunAll(*unsplit, {Request(prompt, Greedy(), 24)});
  auto got = RunAll(scheduler, {Request(prompt, Greedy(), 24)});
  EXPECT_EQ(got[0]->finish.reason, FinishReason::kLength);
  EXPECT_EQ(got[0]->ids, want[0]->ids);
}

}  // namespace scheduler_test
}  // namespace shardlm
