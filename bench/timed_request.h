// One request run to its end on an engine, with the time each token arrived: what the
// decode benchmarks measure.
//
// Goals: one definition of a request's decode rate, (tokens - 1) / (time of its last token -
// time of its first), so prefill and the wait for the first token are left out.
// Non-goals: pairing and medians (each benchmark's own).
//
// Thread safety: RunTimedRequest blocks its caller until the request ends; the callbacks run
// on the engine thread. Lifetime: nothing outlives the call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace shardlm::bench {

using Clock = std::chrono::steady_clock;

struct TimedRun {
  std::string text;
  std::vector<Clock::time_point> times;  // of each token's arrival
  FinishEvent finish;

  double DecodeTokS() const {
    if (times.size() < 2) return 0.0;
    const double s = std::chrono::duration<double>(times.back() - times.front()).count();
    return double(times.size() - 1) / s;
  }
};

// Submits `request` and waits for its end. Errors: Submit's, or the request's own error.
inline Result<TimedRun> RunTimedRequest(Engine& engine, const EngineRequest& request) {
  TimedRun run;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  RequestCallbacks callbacks;
  callbacks.on_token = [&](const TokenEvent& event) {
    std::lock_guard<std::mutex> lock(mu);
    run.times.push_back(Clock::now());
    run.text += event.text;
    return true;
  };
  callbacks.on_finish = [&](const FinishEvent& finish) {
    std::lock_guard<std::mutex> lock(mu);
    run.finish = finish;
    run.text += finish.text;
    done = true;
    cv.notify_all();
  };
  SHARDLM_ASSIGN_OR_RETURN(RequestId id, engine.Submit(request, callbacks));
  (void)id;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (run.finish.reason == FinishReason::kError) return run.finish.error;
  return run;
}

}  // namespace shardlm::bench
