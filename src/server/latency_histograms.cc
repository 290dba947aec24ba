// LatencyHistograms: per-endpoint latency histograms in the Prometheus text format (see
// latency_histograms.h).
#include "server/latency_histograms.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace shardlm::server {

namespace {

// Seconds. The first token waits for a queue and a prefill (up to minutes for a long prompt on
// a CPU); tokens of a stream follow each other in milliseconds to a second (a prefill that
// shares the step); a whole request takes up to many minutes.
constexpr std::array kTtftBounds = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,   0.75,  1.0,  2.5,
                                    5.0,   7.5,  10.0,  20.0, 40.0, 80.0, 160.0, 320.0, 640.0};
constexpr std::array kInterTokenBounds = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03,
                                          0.04,  0.05,   0.075, 0.1,  0.15,  0.2,  0.3,
                                          0.5,   0.75,   1.0,   2.5,  5.0,   10.0};
constexpr std::array kRequestBounds = {0.05, 0.1,  0.25,  0.5,   1.0,   2.5,   5.0,    10.0,  20.0,
                                       30.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3840.0};

struct Metric {
  const char* name;
  const char* help;
};
constexpr Metric kMetrics[LatencyHistograms::kKinds] = {
    {"shardlm_time_to_first_token_seconds",
     "Seconds from a request's arrival to its first generated token (queue and prefill)."},
    {"shardlm_inter_token_latency_seconds",
     "Seconds between consecutive generated tokens of a request."},
    {"shardlm_request_duration_seconds",
     "Seconds from a request's arrival to its last token or error."},
};

// The text format escapes backslash, double quote and newline in label values.
std::string EscapeLabel(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

}  // namespace

std::span<const double> LatencyHistograms::Bounds(Kind kind) {
  switch (kind) {
    case Kind::kTimeToFirstToken:
      return kTtftBounds;
    case Kind::kInterToken:
      return kInterTokenBounds;
    case Kind::kRequest:
      return kRequestBounds;
  }
  return {};
}

LatencyHistograms::LatencyHistograms() = default;

void LatencyHistograms::Observe(Kind kind, std::string_view endpoint, double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // a clock that went back, or NaN, counts as 0
  const std::span<const double> bounds = Bounds(kind);
  const size_t bucket = size_t(std::lower_bound(bounds.begin(), bounds.end(), seconds) -
                               bounds.begin());  // le: the first bound >= seconds
  std::lock_guard<std::mutex> lock(mu_);
  auto& by_endpoint = series_[int(kind)];
  auto found = by_endpoint.find(endpoint);
  if (found == by_endpoint.end()) {
    found = by_endpoint.emplace(std::string(endpoint), Series{}).first;
    found->second.counts.assign(bounds.size() + 1, 0);
  }
  Series& s = found->second;
  ++s.counts[bucket];
  s.sum += seconds;
  ++s.count;
}

std::string LatencyHistograms::Text() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (int k = 0; k < kKinds; ++k) {
    const Metric& metric = kMetrics[k];
    out +=
        fmt::format("# HELP {} {}\n# TYPE {} histogram\n", metric.name, metric.help, metric.name);
    const std::span<const double> bounds = Bounds(Kind(k));
    for (const auto& [endpoint, s] : series_[k]) {
      const std::string label = EscapeLabel(endpoint);
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= bounds.size(); ++b) {
        cumulative += s.counts[b];
        const std::string le = b < bounds.size() ? fmt::format("{}", bounds[b]) : "+Inf";
        out += fmt::format("{}_bucket{{endpoint=\"{}\",le=\"{}\"}} {}\n", metric.name, label, le,
                           cumulative);
      }
      out += fmt::format("{}_sum{{endpoint=\"{}\"}} {}\n", metric.name, label, s.sum);
      out += fmt::format("{}_count{{endpoint=\"{}\"}} {}\n", metric.name, label, s.count);
    }
  }
  return out;
}

}  // namespace shardlm::server
