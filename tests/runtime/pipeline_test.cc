// Pipeline: batches flow through the stages in order and overlap across stages (fake
// stages with exact outputs), a failing stage fails its batch and every later one and is
// reported until Reconnect, bad stage chains and batches are refused; on the fixture
// models, 2- and 3-stage local splits give bitwise the logits of the unsplit model.
#include "runtime/pipeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "runtime/fake_stage.h"

namespace shardlm {
namespace {

using testing::FakeStage;
using testing::FaultyStage;
using testing::Probe;

constexpr int kEmbd = 4;
constexpr int kVocab = 3;

ModelConfig FakeConfig(int n_layers) {
  ModelConfig config;
  config.n_layers = n_layers;
  config.n_embd = kEmbd;
  config.n_vocab = kVocab;
  return config;
}

PipelineOptions FakeOptions() {
  PipelineOptions options;
  options.max_batch_tokens = 8;
  options.max_logit_rows = 4;
  return options;
}

// Stages over `sizes` layers each, optionally each wrapped in a FaultyStage (returned in
// *faulty, by stage).
std::vector<std::unique_ptr<Stage>> FakeStages(const std::vector<int>& sizes, Probe* probe,
                                               std::chrono::microseconds delay,
                                               std::vector<FaultyStage*>* faulty = nullptr) {
  std::vector<std::unique_ptr<Stage>> stages;
  int begin = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto stage = std::make_unique<FakeStage>(int(i), LayerRange{begin, begin + sizes[i]},
                                             i + 1 == sizes.size(), kEmbd, kVocab, probe, delay);
    begin += sizes[i];
    if (faulty) {
      auto wrapped = std::make_unique<FaultyStage>(std::move(stage));
      faulty->push_back(wrapped.get());
      stages.push_back(std::move(wrapped));
    } else {
      stages.push_back(std::move(stage));
    }
  }
  return stages;
}

std::unique_ptr<Pipeline> MakeFake(const std::vector<int>& sizes, Probe* probe = nullptr,
                                   std::chrono::microseconds delay = {},
                                   std::vector<FaultyStage*>* faulty = nullptr) {
  int n_layers = 0;
  for (int size : sizes) n_layers += size;
  auto pipeline = Pipeline::FromStages(FakeStages(sizes, probe, delay, faulty),
                                       FakeConfig(n_layers), FakeOptions());
  EXPECT_TRUE(pipeline.ok()) << pipeline.status().message();
  return pipeline.ok() ? std::move(pipeline).value() : nullptr;
}

// A batch of tokens for slot 0 at positions 0..; the last entry wants logits.
std::vector<BatchEntry> Entries(std::vector<int32_t> tokens) {
  std::vector<BatchEntry> entries;
  for (size_t i = 0; i < tokens.size(); ++i) {
    entries.push_back({tokens[i], int32_t(i), 0, i + 1 == tokens.size()});
  }
  return entries;
}

PipelineBatch View(const std::vector<BatchEntry>& entries) { return {entries, {}, {}}; }

// The logits row a FakeStage pipeline of n_layers gives for the token.
std::vector<float> Expected(int32_t token, int n_layers) {
  std::vector<float> row;
  for (int v = 0; v < kVocab; ++v) row.push_back(float(token + n_layers) * float(v + 1));
  return row;
}

TEST(PipelineTest, BatchesComeBackInOrderWithEveryStageApplied) {
  auto pipeline = MakeFake({1, 2, 3});
  ASSERT_NE(pipeline, nullptr);
  EXPECT_EQ(pipeline->depth(), 3);
  std::vector<std::vector<BatchEntry>> batches = {Entries({5, 7}), Entries({10}),
                                                  Entries({1, 2, 20})};
  for (const auto& entries : batches) ASSERT_TRUE(pipeline->Submit(View(entries)).ok());
  EXPECT_EQ(pipeline->in_flight(), 3);
  const int32_t last_tokens[] = {7, 10, 20};
  for (int32_t token : last_tokens) {
    auto logits = pipeline->WaitOldest();
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    EXPECT_EQ(std::vector<float>(logits->begin(), logits->end()), Expected(token, 6));
  }
  EXPECT_EQ(pipeline->in_flight(), 0);
  const PipelineCounters counters = pipeline->counters();
  EXPECT_EQ(counters.batches, 3u);
  EXPECT_EQ(counters.max_in_flight, 3);
  // 6 tokens, each crossing 2 stage boundaries as n_embd float32 values.
  EXPECT_EQ(counters.bytes_between, 6u * 2u * kEmbd * sizeof(float));
  const std::vector<StageStats> stats = pipeline->Stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].bytes_in, 0u);
  EXPECT_EQ(stats[1].bytes_in, 6u * kEmbd * sizeof(float));
  EXPECT_EQ(stats[2].bytes_out, 3u * kVocab * sizeof(float));
  for (const StageStats& stage : stats) EXPECT_EQ(stage.tokens, 6u);
}

TEST(PipelineTest, StagesComputeDifferentBatchesAtTheSameTime) {
  Probe probe;
  auto pipeline = MakeFake({1, 1}, &probe, std::chrono::milliseconds(20));
  ASSERT_NE(pipeline, nullptr);
  std::vector<BatchEntry> a = Entries({1}), b = Entries({2});
  for (int round = 0; round < 4; ++round) {
    ASSERT_TRUE(pipeline->Submit(View(round % 2 ? b : a)).ok());
    if (pipeline->in_flight() == pipeline->depth()) {
      ASSERT_TRUE(pipeline->WaitOldest().ok());
    }
  }
  while (pipeline->in_flight() > 0) ASSERT_TRUE(pipeline->WaitOldest().ok());
  EXPECT_EQ(probe.max_running.load(), 2) << "stage 0 never ran while stage 1 did";
}

TEST(PipelineTest, OneStageRunsOnTheCallersThread) {
  auto pipeline = MakeFake({4});
  ASSERT_NE(pipeline, nullptr);
  std::vector<float> logits;
  const std::vector<BatchEntry> entries = Entries({3, 9});
  ASSERT_TRUE(pipeline->Run(View(entries), &logits).ok());
  EXPECT_EQ(logits, Expected(9, 4));
}

TEST(PipelineTest, RefusesMoreThanDepthInFlightAndBadBatches) {
  auto pipeline = MakeFake({1, 1});
  ASSERT_NE(pipeline, nullptr);
  const std::vector<BatchEntry> entries = Entries({1});
  ASSERT_TRUE(pipeline->Submit(View(entries)).ok());
  ASSERT_TRUE(pipeline->Submit(View(entries)).ok());
  const Status full = pipeline->Submit(View(entries));
  EXPECT_EQ(full.code(), StatusCode::kInternal);
  EXPECT_NE(full.message().find("WaitOldest"), std::string::npos) << full.message();
  while (pipeline->in_flight() > 0) ASSERT_TRUE(pipeline->WaitOldest().ok());

  EXPECT_EQ(pipeline->Submit(View({})).code(), StatusCode::kInvalidArgument);
  const std::vector<BatchEntry> too_long = Entries({1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(pipeline->Submit(View(too_long)).code(), StatusCode::kInvalidArgument);
  std::vector<BatchEntry> many_rows = Entries({1, 2, 3, 4, 5});
  for (BatchEntry& entry : many_rows) entry.wants_logits = true;
  EXPECT_EQ(pipeline->Submit(View(many_rows)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pipeline->WaitOldest().status().code(), StatusCode::kInternal);
}

TEST(PipelineTest, StagesMustChainOverEveryLayer) {
  auto two = FakeStages({2, 2}, nullptr, {});
  // Model of 5 layers: the stages cover only 4.
  auto short_cover =
      Pipeline::FromStages(FakeStages({2, 2}, nullptr, {}), FakeConfig(5), FakeOptions());
  EXPECT_EQ(short_cover.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_cover.status().message().find("model has 5"), std::string::npos)
      << short_cover.status().message();
  // Reversed order: the first stage does not start at layer 0.
  std::vector<std::unique_ptr<Stage>> reversed;
  reversed.push_back(std::move(two[1]));
  reversed.push_back(std::move(two[0]));
  auto bad_order = Pipeline::FromStages(std::move(reversed), FakeConfig(4), FakeOptions());
  EXPECT_EQ(bad_order.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Pipeline::FromStages({}, FakeConfig(4), FakeOptions()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PipelineTest, ALostStageFailsItsBatchAndLaterOnesUntilReconnect) {
  std::vector<FaultyStage*> faulty;
  auto pipeline = MakeFake({1, 1, 1}, nullptr, std::chrono::milliseconds(5), &faulty);
  ASSERT_NE(pipeline, nullptr);
  const std::vector<BatchEntry> a = Entries({1}), b = Entries({2}), c = Entries({3});
  ASSERT_TRUE(pipeline->Submit(View(a)).ok());
  ASSERT_TRUE(pipeline->WaitOldest().ok());

  faulty[1]->FailAfter(1);  // batch a' passes stage 1, b' fails there
  ASSERT_TRUE(pipeline->Submit(View(a)).ok());
  ASSERT_TRUE(pipeline->Submit(View(b)).ok());
  ASSERT_TRUE(pipeline->Submit(View(c)).ok());
  auto first = pipeline->WaitOldest();
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(std::vector<float>(first->begin(), first->end()), Expected(1, 3));
  for (int k = 0; k < 2; ++k) {
    auto failed = pipeline->WaitOldest();
    EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(failed.status().message().find("stage 1 (fake:1)"), std::string::npos)
        << failed.status().message();
  }
  EXPECT_EQ(pipeline->Health().code(), StatusCode::kUnavailable);
  EXPECT_EQ(pipeline->Submit(View(a)).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pipeline->counters().failed_batches, 2u);

  faulty[1]->set_can_reconnect(false);
  EXPECT_EQ(pipeline->Reconnect().code(), StatusCode::kUnavailable);
  EXPECT_EQ(pipeline->Health().code(), StatusCode::kUnavailable);
  faulty[1]->set_can_reconnect(true);
  ASSERT_TRUE(pipeline->Reconnect().ok());
  EXPECT_TRUE(pipeline->Health().ok());
  std::vector<float> logits;
  ASSERT_TRUE(pipeline->Run(View(c), &logits).ok());
  EXPECT_EQ(logits, Expected(3, 3));
}

TEST(PipelineTest, ReconnectWaitsForAnIdlePipeline) {
  auto pipeline = MakeFake({1, 1});
  ASSERT_NE(pipeline, nullptr);
  const std::vector<BatchEntry> a = Entries({1});
  ASSERT_TRUE(pipeline->Submit(View(a)).ok());
  EXPECT_EQ(pipeline->Reconnect().code(), StatusCode::kInternal);
  ASSERT_TRUE(pipeline->WaitOldest().ok());
  EXPECT_TRUE(pipeline->Reconnect().ok());
}

}  // namespace
}  // namespace shardlm
