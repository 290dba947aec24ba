// Scheduler throughput probe (not part of the suite: DISABLED_, needs a model): aggregate
// decode tok/s of N concurrent greedy streams against one stream, the issue-3 goal being
// >= 3x at 8 streams on 2 cores.
//   SHARDLM_BENCH_MODEL=/path/model.gguf tests/test_runtime
//     --gtest_also_run_disabled_tests --gtest_filter='*SchedulerThroughput*'
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "engine/scheduler.h"
#include "pipeline/model_loader.h"

namespace shardlm {
namespace scheduler_throughput_test {

using Clock = std::chrono::steady_clock;

// Steady-state decode rate: tokens emitted after every stream has its first token, over
// the time from then to the last token.
double DecodeTokensPerSecond(Scheduler& scheduler, int n_streams, int n_tokens) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<Clock::time_point>> stamps(n_streams);
  int finished = 0;
  const std::vector<TokenId> prompt = scheduler.tokenizer().Encode("Once upon a time", true, true);
  for (int i = 0; i < n_streams; ++i) {
    EngineRequest request;
    request.prompt = prompt;
    request.sampling.temperature = 0.0f;
    request.max_tokens = n_tokens;
    request.ignore_eos = true;
    RequestCallbacks callbacks;
    callbacks.on_token = [&, i](const TokenEvent&) {
      std::lock_guard<std::mutex> lock(mu);
      stamps[i].push_back(Clock::now());
      return true;
    };
    callbacks.on_finish = [&](const FinishEvent&) {
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
    };
    EXPECT_TRUE(scheduler.Submit(request, callbacks).ok());
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished == n_streams; });
  Clock::time_point start = Clock::time_point::min(), end = Clock::time_point::min();
  for (const auto& s : stamps) {
    if (s.empty()) continue;
    start = std::max(start, s.front());
    end = std::max(end, s.back());
  }
  int64_t tokens = 0;
  for (const auto& s : stamps) {
    for (Clock::time_point t : s) tokens += t > start;
  }
  const double seconds = std::chrono::duration<double>(end - start).count();
  return seconds > 0 ? tokens / seconds : 0.0;
}

TEST(SchedulerThroughput, DISABLED_ConcurrentStreams) {
  const char* path = std::getenv("SHARDLM_BENCH_MODEL");
  if (!path) GTEST_SKIP() << "set SHARDLM_BENCH_MODEL";
  auto loaded = LoadModelFile(path, {.show_progress = false, .prefault = true});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  SchedulerOptions options;
  options.n_parallel = 8;
  options.n_ctx = 256;
  options.n_batch = 256;
  options.threads = 2;
  options.log_requests = false;
  auto scheduler = Scheduler::Create(std::move(loaded).value(), options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().message();
  const int n_tokens =
      std::getenv("SHARDLM_BENCH_TOKENS") ? std::atoi(std::getenv("SHARDLM_BENCH_TOKENS")) : 32;
  double single = 0.0;
  for (int n : {1, 2, 4, 8}) {
    const double tps = DecodeTokensPerSecond(**scheduler, n, n_tokens);
    if (n == 1) single = tps;
    std::printf("streams=%d aggregate_decode_tok_s=%.2f speedup=%.2fx\n", n, tps,
                single > 0 ? tps / single : 0.0);
  }
}

}  // namespace scheduler_throughput_test
}  // namespace shardlm
