// Tests of the bench runner: statistics, argument checks, a tiny real run through the
// engine, and the same run split into two stages (hidden-row bytes between stages counted,
// bad placement refused).
#include "engine/bench_runner.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pipeline/model_loader.h"
#include "support/fixtures.h"

namespace shardlm {
namespace bench_runner_test {

// Tests that run the bench on the stories260K fixture model.
class BenchRunnerOnStories : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDLM_REQUIRE_FIXTURES();
    auto loaded = LoadModelFile(testing::FixturePath("stories260K.gguf"));
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    stories_ = std::move(*loaded);
  }
  const Model& model() const { return *stories_.model; }
  const Tokenizer& tokenizer() const { return *stories_.tokenizer; }

 private:
  LoadedModel stories_;
};

TEST(BenchRunnerTest, MeanStddevMedian) {
  double mean = 0, stddev = 0;
  MeanStddev({1.0, 2.0, 3.0, 4.0}, mean, stddev);
  EXPECT_DOUBLE_EQ(mean, 2.5);
  EXPECT_NEAR(stddev, std::sqrt(5.0 / 3.0), 1e-12);  // sample stddev (n - 1)
  MeanStddev({7.0}, mean, stddev);
  EXPECT_DOUBLE_EQ(mean, 7.0);
  EXPECT_DOUBLE_EQ(stddev, 0.0);
  EXPECT_DOUBLE_EQ(Median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(Median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST_F(BenchRunnerOnStories, NamesAndRuns) {
  EXPECT_EQ((BenchTest{512, 0}).Name(), "pp512");
  EXPECT_EQ((BenchTest{0, 128}).Name(), "tg128");
  const int threads = 2;
  BenchOptions options;
  options.reps = 3;
  for (const BenchTest& test : {BenchTest{40, 0}, BenchTest{0, 70}}) {  // 70: spans 2 pages
    auto result = RunBench(model(), tokenizer(), threads, test, options);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->samples_ts.size(), 3u);
    EXPECT_GT(result->avg_ts, 0.0);
    EXPECT_GT(result->cpu_share, 0.0);
  }
  EXPECT_FALSE(RunBench(model(), tokenizer(), threads, {0, 0}, options).ok());
  EXPECT_FALSE(RunBench(model(), tokenizer(), threads, {4, 4}, options).ok());
  EXPECT_FALSE(
      RunBench(model(), tokenizer(), threads, {4, 0, 2}, options).ok());  // streams: tg only
  EXPECT_FALSE(RunBench(model(), tokenizer(), threads, {0, 4, 0}, options).ok());
  options.reps = 0;
  EXPECT_FALSE(RunBench(model(), tokenizer(), threads, {4, 0}, options).ok());
}

// tg<N>@d<D>: N tokens decoded after D positions of context, the prefill untimed: the same
// tokens per second count N, and the run takes longer than the timed part (the deep prefill
// is real work, just not in the figure).
TEST_F(BenchRunnerOnStories, DecodesAfterADepthWithThePrefillUntimed) {
  const BenchTest deep{.n_gen = 16, .n_streams = 2, .n_depth = 100};
  EXPECT_EQ(deep.Name(), "tg16x2@d100");
  BenchOptions options;
  options.reps = 2;
  auto result = RunBench(model(), tokenizer(), 2, deep, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->samples_ns.size(), 2u);
  // 32 tokens (16 per stream) over the timed decode only.
  EXPECT_NEAR(result->samples_ts[0], 32e9 / double(result->samples_ns[0]), 1e-6);
  EXPECT_FALSE(RunBench(model(), tokenizer(), 2, {.n_prompt = 8, .n_depth = 4}, options).ok());
}

// tg<N>x<S>: S sequences decode N tokens together; tok/s counts every stream's tokens.
// Unsplit, one batch of S per step. Through a split of 2 stages, the streams alternate in 2
// micro-batches (2 and 1 streams here) with both in flight, as the server runs them, and
// every token crosses the stage boundary as one hidden row. (The first batch of a run holds
// the one-token prompts of all streams, so on the split a batch averages a little over 1.5
// tokens: 210 tokens in 1 + 2 × 69 batches.)
TEST_F(BenchRunnerOnStories, StreamsDecodeTogether) {
  EXPECT_EQ((BenchTest{0, 128, 8}).Name(), "tg128x8");
  const int threads = 2;
  BenchOptions options;
  options.reps = 2;
  for (int stages : {1, 2}) {
    SCOPED_TRACE(stages);
    options.placement.devices.assign(stages, DeviceSpec{});
    auto result = RunBench(model(), tokenizer(), threads, {0, 70, 3}, options);  // 70: 2 pages each
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->samples_ts.size(), 2u);
    // 3 × 70 tokens per run.
    EXPECT_NEAR(result->samples_ts[0], 210e9 / double(result->samples_ns[0]), 1e-6);
    EXPECT_EQ(result->bytes_between_per_token,
              stages == 1 ? 0.0 : double(model().config().n_embd) * sizeof(float));
    EXPECT_DOUBLE_EQ(result->tokens_per_batch, stages == 1 ? 3.0 : 210.0 / 139.0);
    EXPECT_EQ(result->max_in_flight, stages);
  }
}

// Several tests: every repetition of every test before the next repetition, results in the
// order given, and the paired ratio of two tests taken repetition by repetition.
TEST_F(BenchRunnerOnStories, RepetitionsOfSeveralTestsInterleave) {
  const int threads = 2;
  BenchOptions options;
  options.reps = 3;
  const std::vector<BenchTest> tests = {{0, 20, 1}, {0, 20, 4}, {30, 0}};
  std::vector<std::string> order;
  auto results = RunBenches(model(), tokenizer(), threads, tests, options,
                            [&](const BenchTest& test, int rep) {
                              order.push_back(test.Name() + "#" + std::to_string(rep));
                            });
  ASSERT_TRUE(results.ok()) << results.status().message();
  EXPECT_EQ(order, (std::vector<std::string>{"tg20#0", "tg20x4#0", "pp30#0", "tg20#1", "tg20x4#1",
                                             "pp30#1", "tg20#2", "tg20x4#2", "pp30#2"}));
  ASSERT_EQ(results->size(), 3u);
  for (size_t i = 0; i < tests.size(); ++i) {
    EXPECT_EQ((*results)[i].test.Name(), tests[i].Name());
    EXPECT_EQ((*results)[i].samples_ts.size(), 3u);
    EXPECT_GT((*results)[i].median_ts, 0.0);
  }
  // A bad test anywhere is refused before anything runs.
  order.clear();
  const std::vector<BenchTest> bad = {{0, 20, 1}, {0, 0}};
  EXPECT_FALSE(RunBenches(model(), tokenizer(), threads, bad, options, [&](const BenchTest&, int) {
                 order.push_back("ran");
               }).ok());
  EXPECT_TRUE(order.empty());
}

TEST(BenchRunnerTest, PairedRatioIsTheMedianOfPerRepetitionRatios) {
  BenchResult a, b;
  a.samples_ts = {300, 200, 330, 100};
  b.samples_ts = {100, 100, 110, 50};  // ratios 3, 2, 3, 2 → median 2.5
  EXPECT_DOUBLE_EQ(PairedRatio(a, b), 2.5);
  b.samples_ts = {100, 100, 110};  // only the repetitions both have
  EXPECT_DOUBLE_EQ(PairedRatio(a, b), 3.0);
  EXPECT_DOUBLE_EQ(PairedRatio(a, BenchResult{}), 0.0);
}

// Tests interleave unless two of them would hold a remote stage at once (a daemon serves
// one server at a time): one remote test beside local ones is fine.
TEST(BenchRunnerTest, InterleavingNeedsAtMostOneRemoteSubject) {
  BenchOptions options;
  const std::vector<BenchTest> two = {{0, 8, 1}, {0, 8, 4}};
  EXPECT_TRUE(CanInterleave(two, options));
  DeviceSpec remote;
  remote.kind = DeviceSpec::Kind::kUnix;
  remote.socket_path = "/nonexistent.sock";
  options.vs_placement.devices = {DeviceSpec{}, remote};
  std::vector<BenchTest> mixed = {{0, 8, 1}, {0, 8, 1}};
  mixed[1].on_vs = true;
  EXPECT_TRUE(CanInterleave(mixed, options));
  mixed.push_back(mixed[1]);
  mixed.back().n_streams = 4;
  EXPECT_FALSE(CanInterleave(mixed, options));
  options.placement.devices = {DeviceSpec{}, remote};
  EXPECT_FALSE(CanInterleave(two, options));
}

// The same tests on two placements (unsplit and two stages) run interleaved, and each
// result says which placement it ran on by its test.
TEST_F(BenchRunnerOnStories, TwoPlacementsRunInterleaved) {
  const int threads = 2;
  BenchOptions options;
  options.reps = 2;
  options.vs_placement.devices.assign(2, DeviceSpec{});
  std::vector<BenchTest> tests = {{0, 20, 2}, {0, 20, 2}};
  tests[1].on_vs = true;
  std::vector<std::string> order;
  auto results = RunBenches(model(), tokenizer(), threads, tests, options,
                            [&](const BenchTest& test, int rep) {
                              order.push_back((test.on_vs ? "vs#" : "#") + std::to_string(rep));
                            });
  ASSERT_TRUE(results.ok()) << results.status().message();
  EXPECT_EQ(order, (std::vector<std::string>{"#0", "vs#0", "#1", "vs#1"}));
  ASSERT_EQ(results->size(), 2u);
  EXPECT_FALSE((*results)[0].test.on_vs);
  EXPECT_TRUE((*results)[1].test.on_vs);
  EXPECT_EQ((*results)[0].max_in_flight, 1);  // unsplit: one batch of both streams
  EXPECT_EQ((*results)[1].max_in_flight, 2);  // two stages: a micro-batch each
  EXPECT_GT(PairedRatio((*results)[1], (*results)[0]), 0.0);
}

TEST_F(BenchRunnerOnStories, SplitRunCountsBytesBetweenStages) {
  const int threads = 1;
  BenchOptions options;
  options.reps = 2;
  auto unsplit = RunBench(model(), tokenizer(), threads, {0, 20}, options);
  ASSERT_TRUE(unsplit.ok()) << unsplit.status().message();
  EXPECT_EQ(unsplit->bytes_between_per_token, 0.0);

  options.placement.devices.assign(2, DeviceSpec{});
  options.placement.layer_split = {0.4, 0.6};
  for (const BenchTest& test : {BenchTest{24, 0}, BenchTest{0, 20}}) {
    auto result = RunBench(model(), tokenizer(), threads, test, options);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_GT(result->avg_ts, 0.0);
    // One boundary: every token crosses it as n_embd float32 values.
    EXPECT_EQ(result->bytes_between_per_token, double(model().config().n_embd) * sizeof(float));
  }
  options.placement.devices.assign(6, DeviceSpec{});  // 6 stages, 5 layers
  options.placement.layer_split.clear();
  auto too_many = RunBench(model(), tokenizer(), threads, {0, 4}, options);
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace bench_runner_test
}  // namespace shardlm
