// LatencyHistograms: what a user of a streaming API feels, as Prometheus histograms per
// endpoint for GET /metrics: the time to the first token (from the request's arrival: queue
// and prefill), the time between consecutive tokens of a response (inter-token latency: what
// a prefill beside a stream makes stutter), and the time of the whole request.
//
// Goals: the standard histogram exposition (cumulative `_bucket{le}` lines, `_sum`, `_count`),
// fixed buckets that span a CPU server's range (a millisecond to minutes), so a dashboard's
// histogram_quantile works and two servers' series compare; observing costs a lock and a
// short scan, nothing per scrape beyond formatting.
// Non-goals: client-side timing (the network), per-stage latency (pipeline_metrics.h).
//
// Thread safety: Observe and Text may be called from any thread at once.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::server {

class LatencyHistograms {
 public:
  enum class Kind { kTimeToFirstToken = 0, kInterToken = 1, kRequest = 2 };
  static constexpr int kKinds = 3;

  LatencyHistograms();

  // One observation of `seconds` for requests of `endpoint` (a route's name, e.g.
  // "chat.completions"; the label's value).
  void Observe(Kind kind, std::string_view endpoint, double seconds);

  // Every histogram in the Prometheus text format (HELP and TYPE once per metric, then one
  // series per endpoint observed so far).
  std::string Text() const;

  // The upper bounds of a kind's buckets, ascending (+Inf is implied).
  static std::span<const double> Bounds(Kind kind);

 private:
  struct Series {
    std::vector<uint64_t> counts;  // [bucket], not cumulative; the last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Series, std::less<>> series_[kKinds];  // [kind] endpoint → series
};

}  // namespace shardlm::server
