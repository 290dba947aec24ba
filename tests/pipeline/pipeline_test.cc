// Pipeline: batches flow through the stages in order and overlap across stages (fake
// stages with exact outputs), a failing stage fails its batch and every later one and is
// reported until Reconnect, bad stage chains and batches are refused; on the fixture
// models, 2- and 3-stage local splits give bitwise the logits and greedy tokens of the
// unsplit model, through Pipeline::Run and through the engine (Scheduler); impossible placements
// are clear errors.
#include "pipeline/pipeline.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "kv/block_table.h"
#include "pipeline/fake_stage.h"
#include "pipeline/model_loader.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"

namespace shardlm {
namespace pipeline_test {

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
  options.kv.n_pages = 4;
  options.kv.page_tokens = 16;
  options.kv.max_batch_tokens = 8;
  options.max_logit_rows = 4;
  options.max_embedding_rows = 3;
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

// Embedding rows come back beside the logits rows of their batch, in batch order, through
// every stage; a batch with more of them than the pipeline holds is refused.
TEST(PipelineTest, EmbeddingRowsComeBackBesideTheLogits) {
  auto pipeline = MakeFake({1, 2});
  ASSERT_NE(pipeline, nullptr);
  EXPECT_EQ(pipeline->max_embedding_rows(), 3);
  std::vector<BatchEntry> entries = Entries({4, 6, 9});
  entries[0].wants_embedding = true;
  entries[2].wants_embedding = true;
  ASSERT_TRUE(pipeline->Submit(View(entries)).ok());
  Result<PipelineOutputs> outputs = pipeline->WaitOldestOutputs();
  ASSERT_TRUE(outputs.ok()) << outputs.status().message();
  EXPECT_EQ(std::vector<float>(outputs->logits.begin(), outputs->logits.end()), Expected(9, 3));
  std::vector<float> want(kEmbd, -(4.0f + 3));
  want.insert(want.end(), kEmbd, -(9.0f + 3));
  EXPECT_EQ(std::vector<float>(outputs->embeddings.begin(), outputs->embeddings.end()), want);
  EXPECT_EQ(pipeline->Stats()[1].bytes_out, (kVocab + 2u * kEmbd) * sizeof(float));

  std::vector<BatchEntry> too_many = Entries({1, 2, 3, 4});
  for (BatchEntry& entry : too_many) entry.wants_embedding = true;
  const Status refused = pipeline->Submit(View(too_many));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("embedding rows"), std::string::npos) << refused.message();
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

// ---- Fixture models: split invariance ----

// A placement of n unpinned cpu stages with the given weights (empty: equal bytes).
struct Split {
  int n_stages = 1;
  std::vector<double> weights;
};

PipelineOptions RealOptions(const Split& split, int n_pages = 16) {
  PipelineOptions options;
  options.placement.devices.assign(split.n_stages, DeviceSpec{});
  options.placement.layer_split = split.weights;
  options.threads = 1;
  options.kv.n_pages = n_pages;
  options.kv.page_tokens = 16;
  options.kv.max_batch_tokens = 64;
  options.max_logit_rows = 1;
  return options;
}

// Every logits row and greedy token of: the prompt prefilled in chunks of `chunk`, then
// `n_steps` greedy decode steps, each through Pipeline::Run.
struct Trace {
  std::vector<TokenId> ids;
  std::vector<float> logits;
};

void GreedyTrace(Pipeline& pipeline, const std::vector<TokenId>& prompt, int chunk, int n_steps,
                 Trace* trace) {
  BlockTable table(&pipeline.allocator());
  std::vector<BatchEntry> batch;
  std::vector<PageCopy> copies;
  std::vector<float> rows;
  const int n_vocab = pipeline.config().n_vocab;
  // Runs ids at the table's end; records the last entry's logits when `record`.
  auto run = [&](std::span<const TokenId> ids, bool record) {
    const int start = table.n_tokens();
    batch.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      batch.push_back({ids[i], start + int(i), 0, i + 1 == ids.size()});
    }
    copies.clear();
    ASSERT_TRUE(table.PrepareWrite(start, start + int(ids.size()), &copies).ok());
    table.SetTokens(start + int(ids.size()));
    const PageList pages[] = {table.pages()};
    const Status status = pipeline.Run({batch, pages, copies}, &rows);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(rows.size(), size_t(n_vocab));
    if (!record) return;
    trace->logits.insert(trace->logits.end(), rows.begin(), rows.end());
    trace->ids.push_back(TokenId(std::max_element(rows.begin(), rows.end()) - rows.begin()));
  };
  for (size_t done = 0; done < prompt.size(); done += chunk) {
    const size_t n = std::min(prompt.size() - done, size_t(chunk));
    run(std::span<const TokenId>(prompt).subspan(done, n), done + n == prompt.size());
  }
  for (int step = 0; step < n_steps; ++step) {
    const TokenId next[] = {trace->ids.back()};
    run(next, true);
  }
}

const char kStories[] = "stories260K.gguf";   // 5 layers
const char kQwen3[] = "qwen3-tiny-f32.gguf";  // 2 layers

std::string Describe(const Split& split) {
  return fmt::format("{} stages, split '{}'", split.n_stages, fmt::join(split.weights, ","));
}

TEST(PipelineSplitTest, LocalSplitsGiveBitwiseTheUnsplitLogits) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<std::pair<std::string, std::vector<Split>>> cases = {
      {kStories, {{2, {1, 1}}, {2, {0.4, 0.6}}, {3, {}}, {3, {1, 3, 1}}, {2, {5, 1}}}},
      {kQwen3, {{2, {1, 1}}, {2, {0.4, 0.6}}}},
  };
  for (const auto& [file, splits] : cases) {
    SCOPED_TRACE(file);
    const LoadedModel& loaded = testing_util::Fixture(file);
    ASSERT_TRUE(loaded.model);
    const std::vector<TokenId> prompt =
        loaded.tokenizer->Encode("Once upon a time, there was a little dog", true, true);
    auto unsplit = Pipeline::Create(*loaded.model, RealOptions({1, {}}));
    ASSERT_TRUE(unsplit.ok()) << unsplit.status().message();
    Trace want;
    GreedyTrace(**unsplit, prompt, 64, 12, &want);
    ASSERT_EQ(want.ids.size(), 13u);
    for (const Split& split : splits) {
      SCOPED_TRACE(Describe(split));
      auto pipeline = Pipeline::Create(*loaded.model, RealOptions(split));
      ASSERT_TRUE(pipeline.ok()) << pipeline.status().message();
      ASSERT_EQ((*pipeline)->depth(), split.n_stages);
      Trace got;
      GreedyTrace(**pipeline, prompt, 5, 12, &got);  // chunked too: other batch shapes
      EXPECT_EQ(got.ids, want.ids);
      ASSERT_EQ(got.logits.size(), want.logits.size());
      EXPECT_EQ(
          std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0)
          << "logits differ from the unsplit model";
      // Every token crossed each of the n − 1 boundaries as one float32 hidden row.
      const PipelineCounters counters = (*pipeline)->counters();
      EXPECT_EQ(counters.bytes_between, counters.tokens * uint64_t(split.n_stages - 1) *
                                            uint64_t(loaded.model->config().n_embd) *
                                            sizeof(float));
    }
  }
}

TEST(PipelineSplitTest, PlacementShowsContiguousRangesOverEveryLayer) {
  SHARDLM_REQUIRE_FIXTURES();
  const LoadedModel& loaded = testing_util::Fixture(kStories);
  ASSERT_TRUE(loaded.model);
  auto pipeline = Pipeline::Create(*loaded.model, RealOptions({3, {1, 3, 1}}));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().message();
  const std::vector<StageInfo> stages = (*pipeline)->placement();
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0].layers.begin, 0);
  EXPECT_EQ(stages[1].layers.begin, stages[0].layers.end);
  EXPECT_EQ(stages[2].layers.begin, stages[1].layers.end);
  EXPECT_EQ(stages[2].layers.end, 5);
  EXPECT_GT(stages[1].layers.size(), stages[0].layers.size());  // the 3 in 1,3,1
  EXPECT_TRUE(stages[0].first && !stages[0].last && stages[2].last);
}

TEST(PipelineSplitTest, MoreStagesThanLayersIsAClearError) {
  SHARDLM_REQUIRE_FIXTURES();
  const LoadedModel& loaded = testing_util::Fixture(kQwen3);
  ASSERT_TRUE(loaded.model);
  auto pipeline = Pipeline::Create(*loaded.model, RealOptions({3, {}}));
  ASSERT_FALSE(pipeline.ok());
  EXPECT_EQ(pipeline.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pipeline.status().message().find("only 2 layers"), std::string::npos)
      << pipeline.status().message();
  auto weights = Pipeline::Create(*loaded.model, RealOptions({2, {1, 1, 1}}));
  EXPECT_EQ(weights.status().code(), StatusCode::kInvalidArgument);
}

// What `run` does, one request through the engine, split or not: the same tokens, text
// and logits rows (on_logits) bitwise.
struct EngineRun {
  std::vector<TokenId> ids;
  std::string text;
  std::vector<float> logits;  // every row a token was chosen from, in order
};

EngineRun RunThroughEngine(const LoadedModel& loaded, const Split& split) {
  SchedulerOptions options;
  options.n_parallel = 1;
  options.n_ctx = 256;
  options.n_batch = 7;  // prompt in chunks of 7
  options.page_tokens = 16;
  options.threads = 1;
  options.log_requests = false;
  options.placement.devices.assign(split.n_stages, DeviceSpec{});
  options.placement.layer_split = split.weights;
  auto engine = Scheduler::Create(*loaded.model, *loaded.tokenizer, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  EngineRun run;
  if (!engine.ok()) return run;
  EngineRequest request;
  request.prompt =
      loaded.tokenizer->Encode("Once upon a time, there was a little dog named Max.", true, true);
  request.max_tokens = 24;
  request.ignore_eos = true;
  request.sampling.temperature = 0.8f;
  request.sampling.seed = 7;
  std::promise<FinishEvent> finished;
  RequestCallbacks callbacks;
  callbacks.on_logits = [&](std::span<const float> row) {
    run.logits.insert(run.logits.end(), row.begin(), row.end());
    return Status::Ok();
  };
  callbacks.on_token = [&](const TokenEvent& event) {
    run.ids.push_back(event.token);
    run.text += event.text;
    return true;
  };
  callbacks.on_finish = [&](const FinishEvent& event) {
    run.text += event.text;
    finished.set_value(event);
  };
  std::future<FinishEvent> done = finished.get_future();
  EXPECT_TRUE((*engine)->Submit(std::move(request), std::move(callbacks)).ok());
  EXPECT_EQ(done.get().reason, FinishReason::kLength);
  engine->reset();  // joins the engine thread: nothing touches `run` after this
  return run;
}

TEST(PipelineSplitTest, EngineOutputDoesNotDependOnTheSplit) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen3}) {
    SCOPED_TRACE(file);
    const LoadedModel& loaded = testing_util::Fixture(file);
    ASSERT_TRUE(loaded.model);
    const EngineRun want = RunThroughEngine(loaded, {1, {}});
    ASSERT_EQ(want.ids.size(), 24u);
    for (const Split& split : {Split{2, {1, 1}}, Split{2, {0.4, 0.6}}}) {
      SCOPED_TRACE(Describe(split));
      const EngineRun got = RunThroughEngine(loaded, split);
      EXPECT_EQ(got.ids, want.ids);
      EXPECT_EQ(got.text, want.text);
      ASSERT_EQ(got.logits.size(), want.logits.size());
      EXPECT_EQ(
          std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)),
          0);
    }
  }
}

}  // namespace pipeline_test
}  // namespace shardlm
