// One request at a time through the engine (what `shardlm run` does) on the fixture models:
// greedy continuations equal llama.cpp's over the safe prefix of every llama/qwen3 golden
// entry, the logits row of the first generated token (on_logits) equals the golden
// last-position logits, seeded sampling is reproducible, EOG handling, chunked prefill and
// thread count change nothing, logprobs follow greedy choices, the context limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "support/fixtures.h"

namespace shardlm {
namespace generation_test {

using nlohmann::json;
using scheduler_test_util::Collector;
using scheduler_test_util::Encode;
using scheduler_test_util::Fixture;
using scheduler_test_util::Greedy;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using testing::FixturePath;

// One slot, as `run` builds it; 2 threads (determinism must not depend on them).
SchedulerOptions OneSlot(int n_ctx = 512, int n_batch = 512, int threads = 2) {
  SchedulerOptions options;
  options.n_parallel = 1;
  options.n_ctx = n_ctx;
  options.n_batch = n_batch;
  options.threads = threads;
  options.log_requests = false;
  options.prefix_cache = false;
  return options;
}

// A one-slot engine per fixture model, made on first use.
Scheduler* GetEngine(const std::string& model_file) {
  // Loading the model first makes the models' cache older than this one, so the engines
  // are destroyed before the models they compute with.
  if (!Fixture(model_file).model) return nullptr;
  static std::map<std::string, std::unique_ptr<Scheduler>> cache;
  std::unique_ptr<Scheduler>& slot = cache[model_file];
  if (!slot) slot = MakeScheduler(model_file, OneSlot());
  return slot.get();
}

// One request's events and the logits row each generated token was chosen from.
struct Generated {
  std::unique_ptr<Collector> out = std::make_unique<Collector>();
  std::vector<std::vector<float>> rows;
};

Generated Generate(Scheduler& engine, EngineRequest request) {
  Generated generated;
  RequestCallbacks callbacks = generated.out->Callbacks();
  callbacks.on_logits = [rows = &generated.rows](std::span<const float> row) {
    rows->emplace_back(row.begin(), row.end());
    return Status::Ok();
  };
  auto id = engine.Submit(std::move(request), std::move(callbacks));
  EXPECT_TRUE(id.ok()) << id.status().message();
  if (id.ok()) {
    EXPECT_TRUE(generated.out->Wait());
  }
  return generated;
}

std::vector<json> GoldenEntries() { return testing::RunnableGoldenEntries(); }

std::vector<TokenId> PromptIds(const json& entry) {
  return Encode(entry["model"], entry["prompt_text"].get<std::string>(), true);
}

TEST(GenerationTest, GreedyMatchesGoldenOverSafePrefix) {
  SHARDLM_REQUIRE_FIXTURES();
  const json golden = testing::ReadJsonFile(FixturePath("golden.json"));
  for (const json& entry : GoldenEntries()) {
    SCOPED_TRACE(entry["id"].get<std::string>());
    Scheduler* engine = GetEngine(entry["model"]);
    ASSERT_TRUE(engine);
    const std::vector<TokenId> prompt = PromptIds(entry);
    EXPECT_EQ(prompt, entry["prompt_ids"].get<std::vector<TokenId>>());
    Generated result = Generate(*engine, Request(prompt, Greedy(), 32, true));
    const auto want = entry["greedy_ids"].get<std::vector<TokenId>>();
    ASSERT_EQ(result.out->ids.size(), 32u);
    EXPECT_EQ(result.rows.size(), 32u);
    const int safe = entry["greedy_safe_prefix"];
    for (int t = 0; t < safe; ++t) ASSERT_EQ(result.out->ids[t], want[t]) << "step " << t;

    const double atol = golden["suggested_tolerances"]["per_model"][entry["model"]]["atol"];
    const std::vector<float> ref = testing::ReadF32File(FixturePath(entry["logits_file"]));
    ASSERT_FALSE(result.rows.empty());
    const std::vector<float>& row0 = result.rows[0];
    ASSERT_EQ(row0.size(), ref.size());
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, double(std::fabs(row0[i] - ref[i])));
    EXPECT_LE(worst, atol) << "row 0 max abs error";
  }
}

TEST(GenerationTest, StopsAtEogUnlessIgnored) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const json& entry : GoldenEntries()) {
    const auto is_eog = entry["greedy_is_eog"].get<std::vector<bool>>();
    int first_eog = -1;
    for (int t = 0; t < int(is_eog.size()); ++t) {
      if (is_eog[t]) {
        first_eog = t;
        break;
      }
    }
    if (first_eog < 0 || entry["greedy_safe_prefix"].get<int>() <= first_eog) continue;
    SCOPED_TRACE(entry["id"].get<std::string>());
    Scheduler* engine = GetEngine(entry["model"]);
    ASSERT_TRUE(engine);
    const std::vector<TokenId> prompt = PromptIds(entry);
    const auto want = entry["greedy_ids"].get<std::vector<TokenId>>();
    Generated stopped = Generate(*engine, Request(prompt, Greedy(), 32, false));
    EXPECT_EQ(stopped.out->finish.reason, FinishReason::kStop);
    // The EOG token that ends the request is sampled (and counted) but gives no event.
    EXPECT_EQ(stopped.out->ids, std::vector<TokenId>(want.begin(), want.begin() + first_eog));
    EXPECT_EQ(stopped.out->finish.usage.completion_tokens, first_eog + 1);
    EXPECT_EQ(stopped.rows.size(), size_t(first_eog + 1));
    // greedy_text is null where the bytes are not valid UTF-8 (we would print U+FFFD).
    if (!entry["greedy_text"].is_null()) {
      EXPECT_EQ(stopped.out->text, entry["greedy_text"].get<std::string>());
    }

    Generated ignored = Generate(*engine, Request(prompt, Greedy(), 32, true));
    EXPECT_EQ(ignored.out->finish.reason, FinishReason::kLength);
    EXPECT_EQ(ignored.out->ids.size(), 32u);  // EOG tokens fed back like any other
    EXPECT_EQ(
        std::vector<TokenId>(ignored.out->ids.begin(), ignored.out->ids.begin() + first_eog + 1),
        std::vector<TokenId>(want.begin(), want.begin() + first_eog + 1));
    return;  // one entry is enough
  }
  GTEST_SKIP() << "no golden entry stops at an EOG inside its safe prefix";
}

TEST(GenerationTest, TextMatchesGoldenWhenNoEog) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const json& entry : GoldenEntries()) {
    if (entry["greedy_safe_prefix"].get<int>() != 32 || entry["greedy_text"].is_null()) continue;
    const auto is_eog = entry["greedy_is_eog"].get<std::vector<bool>>();
    if (std::find(is_eog.begin(), is_eog.end(), true) != is_eog.end()) continue;
    SCOPED_TRACE(entry["id"].get<std::string>());
    Scheduler* engine = GetEngine(entry["model"]);
    ASSERT_TRUE(engine);
    const uint64_t batches_before = engine->pipeline_counters().batches;
    Generated result = Generate(*engine, Request(PromptIds(entry), Greedy(), 32, false));
    EXPECT_EQ(result.out->finish.reason, FinishReason::kLength);
    EXPECT_EQ(result.out->text, entry["greedy_text"].get<std::string>());
    // One prefill batch, then 31 single-token decode passes (the last token is not fed back).
    EXPECT_EQ(engine->pipeline_counters().batches - batches_before, 32u);
  }
}

std::vector<TokenId> Sampled(Scheduler& engine, uint64_t seed) {
  const SamplingParams params = scheduler_test_util::WholeDistribution(1.5f, seed);
  Generated result = Generate(
      engine, Request(Encode("stories260K.gguf", "Once upon a time", true), params, 24, true));
  return result.out->ids;
}

TEST(GenerationTest, SameSeedSameTokensOtherSeedOtherTokens) {
  SHARDLM_REQUIRE_FIXTURES();
  Scheduler* engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine);
  const std::vector<TokenId> first = Sampled(*engine, 7);
  EXPECT_EQ(first.size(), 24u);
  EXPECT_EQ(first, Sampled(*engine, 7));
  EXPECT_NE(first, Sampled(*engine, 8));
}

TEST(GenerationTest, ChunkedPrefillGivesSameGreedyIds) {
  SHARDLM_REQUIRE_FIXTURES();
  Scheduler* engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine);
  const std::vector<TokenId> prompt = Encode(
      "stories260K.gguf", "Once upon a time, there was a little dog named Max. He liked", true);
  Generated whole = Generate(*engine, Request(prompt, Greedy(), 16, false));
  SchedulerOptions options = OneSlot(512, 3);  // chunks of 3 tokens
  options.page_tokens = 16;
  auto chunked = MakeScheduler("stories260K.gguf", options);
  ASSERT_TRUE(chunked);
  int progress_calls = 0;
  int last_done = 0;
  RequestCallbacks callbacks;
  Generated result;
  callbacks = result.out->Callbacks();
  callbacks.on_prefill = [&](int done, int total) {
    EXPECT_EQ(total, int(prompt.size()));
    EXPECT_GT(done, last_done);
    last_done = done;
    ++progress_calls;
  };
  ASSERT_TRUE(chunked->Submit(Request(prompt, Greedy(), 16, false), std::move(callbacks)).ok());
  ASSERT_TRUE(result.out->Wait());
  EXPECT_EQ(result.out->ids, whole.out->ids);
  EXPECT_EQ(progress_calls, (int(prompt.size()) + 2) / 3);  // one per chunk
  EXPECT_EQ(last_done, int(prompt.size()));
}

TEST(GenerationTest, LogitsDoNotDependOnThreadCount) {
  SHARDLM_REQUIRE_FIXTURES();
  const char kModel[] = "qwen3-tiny-q4_k_m.gguf";
  std::vector<std::vector<float>> rows_by_threads[2];
  for (int n_threads : {1, 2}) {
    auto engine = MakeScheduler(kModel, OneSlot(512, 512, n_threads));
    ASSERT_TRUE(engine);
    Generated result =
        Generate(*engine, Request(Encode(kModel, "Hello, world!", true), Greedy(), 8, true));
    rows_by_threads[n_threads - 1] = std::move(result.rows);
  }
  EXPECT_EQ(rows_by_threads[0].size(), 8u);
  EXPECT_EQ(rows_by_threads[0], rows_by_threads[1]);  // bitwise
}

TEST(GenerationTest, LogprobsFollowGreedyChoices) {
  SHARDLM_REQUIRE_FIXTURES();
  Scheduler* engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine);
  SamplingParams params = Greedy();
  params.n_logprobs = 3;
  EngineRequest request =
      Request(Encode("stories260K.gguf", "Once upon a time", true), params, 6, false);
  request.want_logprobs = true;
  Generated result = Generate(*engine, std::move(request));
  ASSERT_FALSE(result.out->events.empty());
  for (const TokenEvent& token : result.out->events) {
    EXPECT_LE(token.logprob, 0.0f);
    ASSERT_EQ(token.top.size(), 3u);
    EXPECT_EQ(token.top[0].id, token.token);  // greedy: the chosen token is the most likely
    EXPECT_FLOAT_EQ(token.top[0].logprob, token.logprob);
    EXPECT_GE(token.top[1].logprob, token.top[2].logprob);
  }
}

TEST(GenerationTest, ContextLimits) {
  SHARDLM_REQUIRE_FIXTURES();
  auto small = MakeScheduler("stories260K.gguf", OneSlot(8, 512));
  ASSERT_TRUE(small);
  const std::vector<TokenId> prompt = Encode("stories260K.gguf", "Once upon a time", true);
  ASSERT_EQ(prompt.size(), 5u);
  Generated result = Generate(*small, Request(prompt, Greedy(), -1, true));
  EXPECT_EQ(result.out->finish.reason, FinishReason::kLength);
  EXPECT_EQ(result.out->ids.size(), 4u);  // positions 5, 6, 7 fed back, then one more sampled
  auto too_long = small->Submit(
      Request(Encode("stories260K.gguf", "Once upon a time there was a big dog", true), Greedy(),
              -1, true),
      {});
  EXPECT_FALSE(too_long.ok());
}

// A logits callback that fails ends the request with its error.
TEST(GenerationTest, FailingLogitsCallbackEndsTheRequest) {
  SHARDLM_REQUIRE_FIXTURES();
  Scheduler* engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine);
  Collector out;
  RequestCallbacks callbacks = out.Callbacks();
  int calls = 0;
  callbacks.on_logits = [&](std::span<const float>) {
    return ++calls == 3 ? IoError("disk full") : Status::Ok();
  };
  ASSERT_TRUE(engine
                  ->Submit(Request(Encode("stories260K.gguf", "Once upon a time", true), Greedy(),
                                   10, true),
                           std::move(callbacks))
                  .ok());
  ASSERT_TRUE(out.Wait());
  EXPECT_EQ(out.finish.reason, FinishReason::kError);
  EXPECT_EQ(out.finish.error.code(), StatusCode::kIoError);
  EXPECT_EQ(out.ids.size(), 2u);
}

}  // namespace generation_test
}  // namespace shardlm
