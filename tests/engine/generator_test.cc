// End-to-end generation on the fixture models: greedy continuations equal llama.cpp's over
// the safe prefix of every llama/qwen3 golden entry, row 0 of the recorded logits equals
// the golden last-position logits, seeded sampling is reproducible, EOG handling.
#include "engine/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/model_loader.h"
#include "support/fixtures.h"

namespace shardlm {
namespace generator_test {

using nlohmann::json;
using testing::FixturePath;

// A loaded fixture model with a generator on 2 threads (determinism must not depend on it).
struct Engine {
  LoadedModel loaded;
  std::unique_ptr<ThreadPool> threads;
  std::unique_ptr<Generator> generator;
};

Engine& GetEngine(const std::string& model_file) {
  static std::map<std::string, std::unique_ptr<Engine>> cache;
  std::unique_ptr<Engine>& slot = cache[model_file];
  if (!slot) {
    auto engine = std::make_unique<Engine>();
    auto loaded = LoadModelFile(FixturePath(model_file), {.prefault = false});
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    if (!loaded.ok()) return *(slot = std::move(engine));
    engine->loaded = std::move(loaded).value();
    engine->threads = std::make_unique<ThreadPool>(2);
    GeneratorConfig config{512, 512, KvType::kF32, kDefaultPageTokens};
    auto generator = Generator::Create(*engine->loaded.model, *engine->loaded.tokenizer,
                                       *engine->threads, config);
    EXPECT_TRUE(generator.ok()) << generator.status().message();
    if (generator.ok()) engine->generator = std::move(generator).value();
    slot = std::move(engine);
  }
  return *slot;
}

SamplingParams Greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

std::vector<json> GoldenEntries() { return testing::RunnableGoldenEntries(); }

TEST(GeneratorTest, GreedyMatchesGoldenOverSafePrefix) {
  SHARDLM_REQUIRE_FIXTURES();
  const json golden = testing::ReadJsonFile(FixturePath("golden.json"));
  for (const json& entry : GoldenEntries()) {
    SCOPED_TRACE(entry["id"].get<std::string>());
    Engine& engine = GetEngine(entry["model"]);
    ASSERT_TRUE(engine.generator);
    std::vector<float> row0;
    GenerateCallbacks callbacks;
    callbacks.on_logits = [&](std::span<const float> logits) {
      if (row0.empty()) row0.assign(logits.begin(), logits.end());
      return Status::Ok();
    };
    GenerateOptions options;
    options.n_predict = 32;
    options.ignore_eos = true;
    auto result = engine.generator->Generate(entry["prompt_text"].get<std::string>(), Greedy(),
                                             options, callbacks);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->prompt_ids, entry["prompt_ids"].get<std::vector<TokenId>>());
    const auto want = entry["greedy_ids"].get<std::vector<TokenId>>();
    ASSERT_EQ(result->ids.size(), 32u);
    const int safe = entry["greedy_safe_prefix"];
    for (int t = 0; t < safe; ++t) ASSERT_EQ(result->ids[t], want[t]) << "step " << t;

    const double atol = golden["suggested_tolerances"]["per_model"][entry["model"]]["atol"];
    const std::vector<float> ref = testing::ReadF32File(FixturePath(entry["logits_file"]));
    ASSERT_EQ(row0.size(), ref.size());
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, double(std::fabs(row0[i] - ref[i])));
    EXPECT_LE(worst, atol) << "row 0 max abs error";
  }
}

TEST(GeneratorTest, StopsAtEogUnlessIgnored) {
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
    Engine& engine = GetEngine(entry["model"]);
    ASSERT_TRUE(engine.generator);
    const std::string prompt = entry["prompt_text"];
    const auto want = entry["greedy_ids"].get<std::vector<TokenId>>();
    GenerateOptions options;
    options.n_predict = 32;
    auto stopped = engine.generator->Generate(prompt, Greedy(), options);
    ASSERT_TRUE(stopped.ok()) << stopped.status().message();
    EXPECT_EQ(stopped->stop, StopReason::kEog);
    EXPECT_EQ(stopped->ids, std::vector<TokenId>(want.begin(), want.begin() + first_eog + 1));
    // greedy_text is null where the bytes are not valid UTF-8 (we would print U+FFFD).
    if (!entry["greedy_text"].is_null()) {
      EXPECT_EQ(stopped->text, entry["greedy_text"].get<std::string>());
    }

    options.ignore_eos = true;
    auto ignored = engine.generator->Generate(prompt, Greedy(), options);
    ASSERT_TRUE(ignored.ok()) << ignored.status().message();
    EXPECT_EQ(ignored->stop, StopReason::kLength);
    EXPECT_EQ(ignored->ids.size(), 32u);
    return;  // one entry is enough
  }
  GTEST_SKIP() << "no golden entry stops at an EOG inside its safe prefix";
}

TEST(GeneratorTest, TextMatchesGoldenWhenNoEog) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const json& entry : GoldenEntries()) {
    if (entry["greedy_safe_prefix"].get<int>() != 32 || entry["greedy_text"].is_null()) continue;
    const auto is_eog = entry["greedy_is_eog"].get<std::vector<bool>>();
    if (std::find(is_eog.begin(), is_eog.end(), true) != is_eog.end()) continue;
    SCOPED_TRACE(entry["id"].get<std::string>());
    Engine& engine = GetEngine(entry["model"]);
    ASSERT_TRUE(engine.generator);
    GenerateOptions options;
    options.n_predict = 32;
    std::string streamed;
    GenerateCallbacks callbacks;
    callbacks.on_text = [&](std::string_view text) { streamed += text; };
    auto result = engine.generator->Generate(entry["prompt_text"].get<std::string>(), Greedy(),
                                             options, callbacks);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->stop, StopReason::kLength);
    EXPECT_EQ(streamed, entry["greedy_text"].get<std::string>());
    EXPECT_EQ(result->decode_passes, 31);
  }
}

std::vector<TokenId> Sampled(Generator& generator, uint64_t seed) {
  SamplingParams params;
  params.temperature = 1.5f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.seed = seed;
  GenerateOptions options;
  options.n_predict = 24;
  options.ignore_eos = true;
  auto result = generator.Generate("Once upon a time", params, options);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? result->ids : std::vector<TokenId>{};
}

TEST(GeneratorTest, SameSeedSameTokensOtherSeedOtherTokens) {
  SHARDLM_REQUIRE_FIXTURES();
  Engine& engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine.generator);
  const std::vector<TokenId> first = Sampled(*engine.generator, 7);
  EXPECT_EQ(first.size(), 24u);
  EXPECT_EQ(first, Sampled(*engine.generator, 7));
  EXPECT_NE(first, Sampled(*engine.generator, 8));
}

TEST(GeneratorTest, ChunkedPrefillGivesSameGreedyIds) {
  SHARDLM_REQUIRE_FIXTURES();
  Engine& engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine.generator);
  const std::string prompt = "Once upon a time, there was a little dog named Max. He liked";
  GenerateOptions options;
  options.n_predict = 16;
  auto whole = engine.generator->Generate(prompt, Greedy(), options);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  GeneratorConfig config{512, 3, KvType::kF32, 16};  // chunks of 3 tokens, pages of 16
  auto chunked =
      Generator::Create(*engine.loaded.model, *engine.loaded.tokenizer, *engine.threads, config);
  ASSERT_TRUE(chunked.ok());
  auto result = (*chunked)->Generate(prompt, Greedy(), options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->ids, whole->ids);
}

TEST(GeneratorTest, LogitsDoNotDependOnThreadCount) {
  SHARDLM_REQUIRE_FIXTURES();
  auto loaded = LoadModelFile(FixturePath("qwen3-tiny-q4_k_m.gguf"), {.prefault = false});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  std::vector<std::vector<float>> rows_by_threads[2];
  for (int n_threads : {1, 2}) {
    ThreadPool threads(n_threads);
    GeneratorConfig config{512, 512, KvType::kF32, kDefaultPageTokens};
    auto generator = Generator::Create(*loaded->model, *loaded->tokenizer, threads, config);
    ASSERT_TRUE(generator.ok());
    GenerateCallbacks callbacks;
    callbacks.on_logits = [&](std::span<const float> logits) {
      rows_by_threads[n_threads - 1].emplace_back(logits.begin(), logits.end());
      return Status::Ok();
    };
    GenerateOptions options;
    options.n_predict = 8;
    options.ignore_eos = true;
    ASSERT_TRUE((*generator)->Generate("Hello, world!", Greedy(), options, callbacks).ok());
  }
  EXPECT_EQ(rows_by_threads[0], rows_by_threads[1]);  // bitwise
}

TEST(GeneratorTest, LogprobsFollowGreedyChoices) {
  SHARDLM_REQUIRE_FIXTURES();
  Engine& engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine.generator);
  SamplingParams params = Greedy();
  params.n_logprobs = 3;
  GenerateOptions options;
  options.n_predict = 6;
  options.want_logprobs = true;
  auto result = engine.generator->Generate("Once upon a time", params, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->logprobs.size(), result->ids.size());
  for (size_t t = 0; t < result->ids.size(); ++t) {
    const SampledToken& token = result->logprobs[t];
    EXPECT_EQ(token.id, result->ids[t]);
    EXPECT_LE(token.logprob, 0.0f);
    ASSERT_EQ(token.top.size(), 3u);
    EXPECT_EQ(token.top[0].id, token.id);  // greedy: the chosen token is the most likely
    EXPECT_FLOAT_EQ(token.top[0].logprob, token.logprob);
    EXPECT_GE(token.top[1].logprob, token.top[2].logprob);
  }
}

TEST(GeneratorTest, ContextLimits) {
  SHARDLM_REQUIRE_FIXTURES();
  Engine& engine = GetEngine("stories260K.gguf");
  ASSERT_TRUE(engine.generator);
  GeneratorConfig config{8, 512, KvType::kF32, kDefaultPageTokens};
  auto small =
      Generator::Create(*engine.loaded.model, *engine.loaded.tokenizer, *engine.threads, config);
  ASSERT_TRUE(small.ok());
  GenerateOptions options;
  options.n_predict = -1;
  options.ignore_eos = true;
  auto result = (*small)->Generate("Once upon a time", Greedy(), options);  // 5 tokens
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->stop, StopReason::kContext);
  EXPECT_EQ(result->ids.size(), 4u);  // positions 5, 6, 7 fed back, then one more sampled
  auto too_long = (*small)->Generate("Once upon a time there was a big dog", Greedy(), options);
  EXPECT_FALSE(too_long.ok());
}

}  // namespace generator_test
}  // namespace shardlm
