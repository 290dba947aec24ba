// Helpers shared by the engine tests on fixture models (prefix cache, disk tier, slots,
// sampling): the starting scheduler options, request and sampling builders, a Collector of
// one request's events (held mid-run on demand), story prompts of an exact length, bitwise
// output comparison and a shard daemon on a thread. The fixture models themselves come
// from support/fixture_models.h.
//
// Goals: one copy of what every scheduler-level test needs.
// Non-goals: assertions beyond output; what one test file alone is about.
//
// Thread safety: Collector's callbacks run on the engine thread, its fields are read by the
// test thread under its mutex (or after Wait). Lifetime: Fixture's models live until exit.
#pragma once

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

#include "engine/scheduler.h"
#include "pipeline/fake_stage.h"
#include "pipeline/model_loader.h"
#include "pipeline/pipeline.h"
#include "pipeline/stage_factory.h"
#include "shard/shard_service.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"
#include "support/sanitizer.h"
#include "support/temp_dir.h"

namespace shardlm::scheduler_test_util {

inline const char kStories[] = "stories260K.gguf";
inline const char kQwen[] = "qwen3-tiny-f32.gguf";
inline const char kQwen35[] = "qwen35-tiny.gguf";  // gated DeltaNet layers
// Layers of two head shapes, the last two reading earlier layers' KV, per-layer inputs.
inline const char kGemma4[] = "gemma4-tiny.gguf";

using shardlm::testing::kSanitizedBuild;
// The models a long test runs on: `all`, or under a sanitizer, where every step is many times
// slower, `sanitized` (a few that still reach every kind of layer the test exercises; the
// Release run covers them all).
inline std::vector<const char*> ModelsUnlessSanitized(std::vector<const char*> all,
                                                      std::vector<const char*> sanitized) {
  return kSanitizedBuild ? sanitized : all;
}

inline const char kLongText[] =
    "Once upon a time, there was a little dog named Max. He liked to run in the park with "
    "his friend Lily. One day they found a big red ball under a tree.";

using testing_util::Fixture;

// A scheduler over fixture `file` (model_path set, so remote stages and the disk tier work).
inline std::unique_ptr<Scheduler> MakeScheduler(const std::string& file,
                                                const SchedulerOptions& options) {
  const LoadedModel& loaded = Fixture(file);
  if (!loaded.model) return nullptr;
  SchedulerOptions with_path = options;
  with_path.placement.model_path = testing::FixturePath(file);
  auto scheduler = Scheduler::Create(*loaded.model, *loaded.tokenizer, with_path);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().message();
  return scheduler.ok() ? std::move(scheduler).value() : nullptr;
}

// One request's events: tokens, logprobs, text (the finish event's released text
// included). With `gate_after` set, on_token holds the engine thread once that many tokens
// arrived (fulfilling `reached`) until `release` is set, so a test can look at the engine
// mid-run (SubmitHeld does the waiting); on_token returns false (cancels) once
// `cancel_after` tokens arrived.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenId> ids;
  std::vector<float> logprobs;
  std::vector<TokenEvent> events;  // every TokenEvent, in order
  std::string text;
  bool done = false;
  FinishEvent finish;
  int gate_after = -1;
  int cancel_after = -1;
  std::promise<void> reached;
  std::promise<void> release;

  RequestCallbacks Callbacks() {
    RequestCallbacks callbacks;
    callbacks.on_token = [this](const TokenEvent& event) {
      int n = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.push_back(event.token);
        logprobs.push_back(event.logprob);
        events.push_back(event);
        text += event.text;
        n = int(ids.size());
      }
      if (n == gate_after) {
        reached.set_value();
        release.get_future().wait();
      }
      return cancel_after < 0 || n < cancel_after;
    };
    callbacks.on_finish = [this](const FinishEvent& event) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_FALSE(done) << "on_finish called twice";
      finish = event;
      text += event.text;
      done = true;
      cv.notify_all();
    };
    return callbacks;
  }
  bool Wait(int seconds = 120) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return done; });
  }
};

// Greedy when seed is 0, else temperature 1.1 with that seed; EOS ignored, logprobs on.
inline EngineRequest Request(std::vector<TokenId> prompt, int max_tokens, uint64_t seed = 0) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = seed == 0 ? 0.0f : 1.1f;
  request.sampling.seed = seed;
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  request.want_logprobs = true;
  return request;
}

inline SamplingParams Greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

// A request with these sampling settings and nothing else asked for.
inline EngineRequest Request(std::vector<TokenId> prompt, const SamplingParams& sampling,
                             int max_tokens, bool ignore_eos = true) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.sampling = sampling;
  request.max_tokens = max_tokens;
  request.ignore_eos = ignore_eos;
  return request;
}

// Submits `request` into `collector`, held after `after` tokens, and waits until the engine
// thread is held there: it goes on once the test sets collector.release.
inline Result<RequestId> SubmitHeld(Scheduler& scheduler, const EngineRequest& request,
                                    Collector& collector, int after) {
  collector.gate_after = after;
  Result<RequestId> id = scheduler.Submit(request, collector.Callbacks());
  EXPECT_TRUE(id.ok()) << id.status().message();
  if (id.ok()) collector.reached.get_future().wait();
  return id;
}

// Submits every request at once and waits for all of them, each into a C (a Collector or
// one that collects more).
template <typename C = Collector>
std::vector<std::unique_ptr<C>> RunAll(Scheduler& scheduler,
                                       const std::vector<EngineRequest>& requests) {
  std::vector<std::unique_ptr<C>> out;
  for (const EngineRequest& request : requests) {
    out.push_back(std::make_unique<C>());
    auto id = scheduler.Submit(request, out.back()->Callbacks());
    EXPECT_TRUE(id.ok()) << id.status().message();
    if (!id.ok()) out.back()->done = true;
  }
  for (auto& c : out) EXPECT_TRUE(c->Wait());
  return out;
}

inline std::unique_ptr<Collector> RunOne(Scheduler& scheduler, const EngineRequest& request) {
  return std::move(RunAll(scheduler, {request})[0]);
}

inline std::vector<TokenId> Encode(const std::string& file, const std::string& text, bool bos) {
  return Fixture(file).tokenizer->Encode(text, bos, true);
}

// A story prompt of exactly n tokens (BOS included), repeating text as needed.
inline std::vector<TokenId> StoryTokens(const std::string& file, int n, const std::string& text) {
  std::vector<TokenId> tokens = Encode(file, text, true);
  const std::vector<TokenId> more = Encode(file, " " + text, false);
  while (int(tokens.size()) < n) tokens.insert(tokens.end(), more.begin(), more.end());
  tokens.resize(size_t(n));
  return tokens;
}

inline std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline void ExpectSameOutput(const Collector& got, const Collector& want) {
  EXPECT_EQ(got.finish.reason, want.finish.reason);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.logprobs, want.logprobs);  // bitwise
}

// A daemon on a thread of this process (like `shardlm shard`), restartable on one path.
class ServiceThread {
 public:
  // batch_delay: each batch waits this long first (a slow stage).
  explicit ServiceThread(const std::string& socket_path,
                         std::chrono::milliseconds batch_delay = {}) {
    ShardServiceOptions options;
    options.socket_path = socket_path;
    options.run_delay_for_test = batch_delay;
    options.threads = 1;
    options.log = [](const std::string&) {};
    Result<std::unique_ptr<ShardService>> service = ShardService::Create(std::move(options));
    EXPECT_TRUE(service.ok()) << service.status().message();
    if (!service.ok()) return;
    service_ = std::move(service).value();
    thread_ = std::thread([this] { run_status_ = service_->Run(); });
  }
  ~ServiceThread() {
    if (!service_) return;
    service_->Stop();
    thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_.message();
  }
  bool ok() const { return service_ != nullptr; }

 private:
  std::unique_ptr<ShardService> service_;
  std::thread thread_;
  Status run_status_;
};

// Positions per KV page in TestOptions: small, so the tests' prompts span several pages.
inline constexpr int kPageTokens = 16;

// The options the engine tests start from: a small context and batch, pages of kPageTokens
// positions, two threads, no log lines; a test changes what it is about.
inline SchedulerOptions TestOptions(int n_parallel, int n_ctx = 256, int n_batch = 64) {
  SchedulerOptions options;
  options.n_parallel = n_parallel;
  options.n_ctx = n_ctx;
  options.n_batch = n_batch;
  options.threads = 2;
  options.page_tokens = kPageTokens;
  options.log_requests = false;
  return options;
}

// Sampling over the whole distribution at `temperature` (no top-k, top-p or min-p), seeded.
inline SamplingParams WholeDistribution(float temperature, uint64_t seed) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.seed = seed;
  return params;
}

// `options` with its second device a daemon at `socket` (layers split evenly).
inline SchedulerOptions WithRemoteStage(SchedulerOptions options, const std::string& socket) {
  options.placement.devices.resize(2);
  options.placement.devices[1].kind = DeviceSpec::Kind::kUnix;
  options.placement.devices[1].socket_path = socket;
  options.placement.layer_split = {1, 1};
  options.threads = 1;
  return options;
}

// A scheduler over the stages `options` places, its stage 1 wrapped in a FaultyStage the
// test can make fail (and refuse to reconnect). scheduler is null when building failed (the
// test has failed then too).
struct FaultySplit {
  std::unique_ptr<Scheduler> scheduler;
  testing::FaultyStage* faulty = nullptr;  // owned by the scheduler's pipeline
};

inline FaultySplit SchedulerWithFaultyStage1(const LoadedModel& loaded,
                                             const SchedulerOptions& options) {
  FaultySplit split;
  auto stages = BuildStages(*loaded.model, options.ToPipelineOptions());
  EXPECT_TRUE(stages.ok()) << stages.status().message();
  if (!stages.ok() || stages->size() < 2) return split;
  auto faulty_stage = std::make_unique<testing::FaultyStage>(std::move((*stages)[1]));
  split.faulty = faulty_stage.get();
  (*stages)[1] = std::move(faulty_stage);
  auto pipeline = Pipeline::FromStages(std::move(stages).value(), loaded.model->config(),
                                       options.ToPipelineOptions());
  EXPECT_TRUE(pipeline.ok()) << pipeline.status().message();
  if (!pipeline.ok()) return split;
  auto created = Scheduler::Create(std::move(pipeline).value(), *loaded.tokenizer, options);
  EXPECT_TRUE(created.ok()) << created.status().message();
  if (created.ok()) split.scheduler = std::move(created).value();
  return split;
}

}  // namespace shardlm::scheduler_test_util
