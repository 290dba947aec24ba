// LatencyHistograms: observations land in the bucket of the first bound at or above them, the
// exposition is cumulative with +Inf, _sum and _count per endpoint, label values are escaped,
// and concurrent observers lose nothing.
#include "server/latency_histograms.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace shardlm::server {
namespace {

using Kind = LatencyHistograms::Kind;

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(LatencyHistogramsTest, BucketsAreCumulativeWithInfSumAndCount) {
  LatencyHistograms h;
  h.Observe(Kind::kInterToken, "chat", 0.01);   // exactly a bound: its own bucket (le)
  h.Observe(Kind::kInterToken, "chat", 0.012);  // the next one up
  h.Observe(Kind::kInterToken, "chat", 99.0);   // past every bound: +Inf only
  const std::string text = h.Text();
  const std::string m = "shardlm_inter_token_latency_seconds";
  EXPECT_TRUE(Has(text, "# TYPE " + m + " histogram")) << text;
  EXPECT_TRUE(Has(text, m + "_bucket{endpoint=\"chat\",le=\"0.005\"} 0")) << text;
  EXPECT_TRUE(Has(text, m + "_bucket{endpoint=\"chat\",le=\"0.01\"} 1")) << text;
  EXPECT_TRUE(Has(text, m + "_bucket{endpoint=\"chat\",le=\"0.015\"} 2")) << text;
  EXPECT_TRUE(Has(text, m + "_bucket{endpoint=\"chat\",le=\"10\"} 2")) << text;
  EXPECT_TRUE(Has(text, m + "_bucket{endpoint=\"chat\",le=\"+Inf\"} 3")) << text;
  EXPECT_TRUE(Has(text, m + "_count{endpoint=\"chat\"} 3")) << text;
  EXPECT_TRUE(Has(text, m + "_sum{endpoint=\"chat\"} 99.022")) << text;
  // Every metric is declared even before its first observation; no series yet.
  EXPECT_TRUE(Has(text, "# TYPE shardlm_time_to_first_token_seconds histogram")) << text;
  EXPECT_TRUE(Has(text, "# TYPE shardlm_request_duration_seconds histogram")) << text;
  EXPECT_EQ(text.find("shardlm_request_duration_seconds_count"), std::string::npos) << text;
}

TEST(LatencyHistogramsTest, EndpointsAreSeparateSeriesAndLabelsAreEscaped) {
  LatencyHistograms h;
  h.Observe(Kind::kTimeToFirstToken, "chat", 0.3);
  h.Observe(Kind::kTimeToFirstToken, "messages", 2.0);
  h.Observe(Kind::kRequest, "a\"b\\c\nd", 1.0);
  h.Observe(Kind::kRequest, "chat", -1.0);  // a clock that went back counts as 0
  h.Observe(Kind::kRequest, "chat", std::nan(""));
  const std::string text = h.Text();
  EXPECT_TRUE(Has(text, "shardlm_time_to_first_token_seconds_count{endpoint=\"chat\"} 1"));
  EXPECT_TRUE(Has(text, "shardlm_time_to_first_token_seconds_count{endpoint=\"messages\"} 1"));
  EXPECT_TRUE(Has(text, "shardlm_request_duration_seconds_count{endpoint=\"a\\\"b\\\\c\\nd\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "shardlm_request_duration_seconds_bucket{endpoint=\"chat\",le=\"0.05\"} 2"))
      << text;
  EXPECT_TRUE(Has(text, "shardlm_request_duration_seconds_sum{endpoint=\"chat\"} 0")) << text;
}

TEST(LatencyHistogramsTest, BoundsAscend) {
  for (Kind kind : {Kind::kTimeToFirstToken, Kind::kInterToken, Kind::kRequest}) {
    const auto bounds = LatencyHistograms::Bounds(kind);
    ASSERT_GT(bounds.size(), 10u);
    for (size_t i = 1; i < bounds.size(); ++i) EXPECT_LT(bounds[i - 1], bounds[i]);
  }
}

TEST(LatencyHistogramsTest, ConcurrentObserversLoseNothing) {
  LatencyHistograms h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 1000; ++i) {
        h.Observe(Kind::kInterToken, t % 2 == 0 ? "chat" : "completions", 0.02);
        if (i % 100 == 0) (void)h.Text();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string text = h.Text();
  EXPECT_TRUE(Has(text, "shardlm_inter_token_latency_seconds_count{endpoint=\"chat\"} 2000"));
  EXPECT_TRUE(
      Has(text, "shardlm_inter_token_latency_seconds_count{endpoint=\"completions\"} 2000"));
}

}  // namespace
}  // namespace shardlm::server
