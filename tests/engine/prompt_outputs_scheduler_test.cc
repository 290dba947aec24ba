// Requests that need outputs of every prompt position, end to end through the Scheduler on
// the fixture models: embedding requests (RequestKind::kEmbedding) finish with the mean of
// the prompt's embedding rows, and generation requests with want_prompt_logprobs hear the
// log-probability of every prompt token before their first token. Both are bitwise the same
// whatever shares their batches, however the prompt is chunked, with any thread count and
// any layer split (local or through a shard daemon); they compute their whole prompt
// (never a prefix-cache hit) but publish its pages for later requests; an engine built
// without embeddings refuses them, and a prompt longer than the context is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/scheduler_test_util.h"
#include "pipeline/pipeline.h"
#include "support/fixtures.h"

namespace shardlm {
namespace prompt_outputs_scheduler_test {

using scheduler_test_util::Collector;
using scheduler_test_util::ExpectSameOutput;
using scheduler_test_util::Fixture;
using scheduler_test_util::kLongText;
using scheduler_test_util::kQwen;
using scheduler_test_util::kStories;
using scheduler_test_util::MakeScheduler;
using scheduler_test_util::Request;
using scheduler_test_util::RunAll;
using scheduler_test_util::ServiceThread;
using scheduler_test_util::StoryTokens;
using scheduler_test_util::WithRemoteStage;

SchedulerOptions Options(int n_parallel = 4, int n_batch = 64) {
  SchedulerOptions options = scheduler_test_util::TestOptions(n_parallel, 128, n_batch);
  options.embeddings = true;
  return options;
}

EngineRequest Embedding(std::vector<TokenId> prompt) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.kind = RequestKind::kEmbedding;
  return request;
}

// A greedy request that also wants its prompt's logprobs (3 alternatives each).
EngineRequest Echo(std::vector<TokenId> prompt, int max_tokens) {
  EngineRequest request = Request(std::move(prompt), max_tokens);
  request.sampling.n_logprobs = 3;
  request.want_prompt_logprobs = true;
  return request;
}

// Collector plus the prompt logprobs, and whether they came before the first token.
struct PromptCollector : Collector {
  std::vector<TokenEvent> prompt;
  int prompt_calls = 0;
  bool prompt_before_tokens = true;

  RequestCallbacks Callbacks() {
    RequestCallbacks callbacks = Collector::Callbacks();
    callbacks.on_prompt_logprobs = [this](const std::vector<TokenEvent>& events) {
      std::lock_guard<std::mutex> lock(mu);
      prompt = events;
      ++prompt_calls;
      prompt_before_tokens = ids.empty();
      return true;
    };
    return callbacks;
  }
};

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The prompt through a one-stage pipeline in one batch, every position wanting logits and
// its embedding: what the scheduler's results must be made of.
PipelineOutputs Reference(const std::string& file, const std::vector<TokenId>& prompt,
                          std::vector<float>& storage) {
  PipelineOptions options;
  options.threads = 1;
  options.kv.n_pages = 8;
  options.kv.page_tokens = 16;
  options.kv.max_batch_tokens = int(prompt.size());
  options.max_logit_rows = int(prompt.size());
  options.max_embedding_rows = int(prompt.size());
  auto pipeline = Pipeline::Create(*Fixture(file).model, options);
  EXPECT_TRUE(pipeline.ok()) << pipeline.status().message();
  if (!pipeline.ok()) return {};
  std::vector<PageId> pages;
  for (int i = 0; i * 16 < int(prompt.size()); ++i)
    pages.push_back((*pipeline)->allocator().Allocate().value());
  std::vector<BatchEntry> entries;
  for (size_t i = 0; i < prompt.size(); ++i) {
    entries.push_back({.token = prompt[i],
                       .position = int32_t(i),
                       .slot = 0,
                       .wants_logits = true,
                       .wants_embedding = true});
  }
  const PageList lists[] = {pages};
  EXPECT_TRUE((*pipeline)->Submit({entries, lists, {}}).ok());
  auto outputs = (*pipeline)->WaitOldestOutputs();
  EXPECT_TRUE(outputs.ok()) << outputs.status().message();
  if (!outputs.ok()) return {};
  storage.assign(outputs->logits.begin(), outputs->logits.end());
  const size_t n_logits = storage.size();
  storage.insert(storage.end(), outputs->embeddings.begin(), outputs->embeddings.end());
  for (PageId page : pages) (*pipeline)->allocator().Release(page);
  return {std::span<const float>(storage).first(n_logits),
          std::span<const float>(storage).subspan(n_logits)};
}

TEST(PromptOutputsSchedulerTest, EmbeddingIsTheMeanOfTheLastStageRows) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    SCOPED_TRACE(file);
    const std::vector<TokenId> prompt = StoryTokens(file, 23, kLongText);
    auto scheduler = MakeScheduler(file, Options());
    ASSERT_TRUE(scheduler);
    EXPECT_TRUE(scheduler->info().embeddings);
    const int n_embd = scheduler->info().n_embd;
    auto got = RunAll<PromptCollector>(*scheduler, {Embedding(prompt)});
    EXPECT_EQ(got[0]->finish.reason, FinishReason::kStop);
    EXPECT_TRUE(got[0]->ids.empty());
    EXPECT_EQ(got[0]->finish.usage.prompt_tokens, 23);
    EXPECT_EQ(got[0]->finish.usage.completion_tokens, 0);
    ASSERT_EQ(got[0]->finish.embedding.size(), size_t(n_embd));

    std::vector<float> storage;
    const PipelineOutputs ref = Reference(file, prompt, storage);
    ASSERT_EQ(ref.embeddings.size(), prompt.size() * size_t(n_embd));
    std::vector<float> want(static_cast<size_t>(n_embd));
    for (int i = 0; i < n_embd; ++i) {
      double sum = 0;
      for (size_t p = 0; p < prompt.size(); ++p) sum += ref.embeddings[p * n_embd + size_t(i)];
      want[size_t(i)] = float(sum / double(prompt.size()));
    }
    EXPECT_TRUE(Bitwise(got[0]->finish.embedding, want));
    double norm = 0;
    for (float v : want) norm += double(v) * v;
    EXPECT_GT(norm, 1e-6);
  }
}

// The same embedding alone, among generation and other embedding requests, in prompt
// chunks of 5 and 16 tokens, with 1 thread, and split over two local stages or a local
// stage and a shard daemon; and the generation requests beside it are what they are alone.
TEST(PromptOutputsSchedulerTest, EmbeddingIsBitwiseTheSameWhateverTheBatchChunksAndSplit) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<TokenId> prompt = StoryTokens(kStories, 41, kLongText);
  const std::vector<EngineRequest> crowd = {
      Request(StoryTokens(kStories, 30, "The cat sat."), 12, 7), Embedding(prompt),
      Embedding(StoryTokens(kStories, 9, "Lily ran.")),
      Echo(StoryTokens(kStories, 17, "A dog."), 5)};
  auto alone = MakeScheduler(kStories, Options());
  ASSERT_TRUE(alone);
  const std::vector<float> want =
      RunAll<PromptCollector>(*alone, {Embedding(prompt)})[0]->finish.embedding;
  ASSERT_FALSE(want.empty());
  const auto sampled_alone = RunAll<PromptCollector>(*alone, {crowd[0]});
  const auto echo_alone = RunAll<PromptCollector>(*alone, {crowd[3]});
  const std::string socket = (std::filesystem::temp_directory_path() /
                              ("shardlm_embed_" + std::to_string(::getpid()) + ".sock"))
                                 .string();
  ServiceThread daemon(socket);
  ASSERT_TRUE(daemon.ok());
  struct Setup {
    const char* name;
    SchedulerOptions options;
  };
  SchedulerOptions chunked5 = Options(4, 8);
  chunked5.prefill_chunk = 5;
  SchedulerOptions one_thread = Options(2, 16);
  one_thread.threads = 1;
  SchedulerOptions split = Options();
  split.placement.devices.resize(2);
  split.placement.layer_split = {2, 3};
  const Setup setups[] = {{"crowded, chunks of 5", chunked5},
                          {"1 thread, batches of 16", one_thread},
                          {"two local stages", split},
                          {"local + shard daemon", WithRemoteStage(Options(), socket)}};
  for (const Setup& setup : setups) {
    SCOPED_TRACE(setup.name);
    auto scheduler = MakeScheduler(kStories, setup.options);
    ASSERT_TRUE(scheduler);
    auto got = RunAll<PromptCollector>(*scheduler, crowd);
    EXPECT_EQ(got[1]->finish.reason, FinishReason::kStop);
    EXPECT_TRUE(Bitwise(got[1]->finish.embedding, want));
    EXPECT_EQ(got[0]->ids.size(), 12u);
    ExpectSameOutput(*got[0], *sampled_alone[0]);
    ExpectSameOutput(*got[3], *echo_alone[0]);
    ASSERT_EQ(got[3]->prompt.size(), echo_alone[0]->prompt.size());
    for (size_t i = 0; i < got[3]->prompt.size(); ++i) {
      EXPECT_EQ(got[3]->prompt[i].logprob, echo_alone[0]->prompt[i].logprob) << i;  // bitwise
    }
    EXPECT_EQ(got[2]->finish.embedding.size(), want.size());
    EXPECT_EQ(scheduler->Stats().kv_pages_used, 0);
  }
}

TEST(PromptOutputsSchedulerTest, PromptLogprobsAreEveryPromptTokensLogSoftmax) {
  SHARDLM_REQUIRE_FIXTURES();
  for (const char* file : {kStories, kQwen}) {
    SCOPED_TRACE(file);
    const std::vector<TokenId> prompt = StoryTokens(file, 20, kLongText);
    auto scheduler = MakeScheduler(file, Options());
    ASSERT_TRUE(scheduler);
    auto got = RunAll<PromptCollector>(*scheduler, {Echo(prompt, 6), Request(prompt, 6)});
    const PromptCollector& echo = *got[0];
    EXPECT_EQ(echo.prompt_calls, 1);
    EXPECT_TRUE(echo.prompt_before_tokens);
    ASSERT_EQ(echo.prompt.size(), prompt.size() - 1);
    // Generation is what it would be without the prompt's logprobs.
    ExpectSameOutput(echo, *got[1]);
    EXPECT_EQ(got[1]->prompt_calls, 0);

    std::vector<float> storage;
    const PipelineOutputs ref = Reference(file, prompt, storage);
    const size_t n_vocab = size_t(scheduler->info().n_vocab);
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
      const std::span<const float> row = ref.logits.subspan(i * n_vocab, n_vocab);
      const double lse = LogSumExp(row);
      const TokenEvent& event = echo.prompt[i];
      EXPECT_EQ(event.token, prompt[i + 1]) << i;
      EXPECT_EQ(event.logprob, float(double(row[size_t(prompt[i + 1])]) - lse)) << i;
      ASSERT_EQ(event.top.size(), 3u) << i;
      EXPECT_EQ(event.top[0].id, TopLogprobs(row, 1, lse)[0].id) << i;
      EXPECT_LE(event.logprob, event.top[0].logprob) << i;
    }
  }
}

// Prompt logprobs in batches of 3 logits rows (prompt_logit_rows), among other requests,
// split: bitwise those of one batch.
TEST(PromptOutputsSchedulerTest, PromptLogprobsDoNotDependOnChunksOrCompany) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<TokenId> prompt = StoryTokens(kStories, 37, kLongText);
  auto alone = MakeScheduler(kStories, Options());
  ASSERT_TRUE(alone);
  auto want = RunAll<PromptCollector>(*alone, {Echo(prompt, 4)});
  SchedulerOptions small = Options(3, 16);
  small.prompt_logit_rows = 3;
  small.placement.devices.resize(2);
  auto scheduler = MakeScheduler(kStories, small);
  ASSERT_TRUE(scheduler);
  auto got = RunAll<PromptCollector>(
      *scheduler, {Request(StoryTokens(kStories, 25, "Max ran."), 10, 3), Echo(prompt, 4),
                   Echo(StoryTokens(kStories, 12, "Lily."), 2)});
  ExpectSameOutput(*got[1], *want[0]);
  ASSERT_EQ(got[1]->prompt.size(), want[0]->prompt.size());
  for (size_t i = 0; i < want[0]->prompt.size(); ++i) {
    EXPECT_EQ(got[1]->prompt[i].token, want[0]->prompt[i].token) << i;
    EXPECT_EQ(got[1]->prompt[i].logprob, want[0]->prompt[i].logprob) << i;  // bitwise
    ASSERT_EQ(got[1]->prompt[i].top.size(), want[0]->prompt[i].top.size()) << i;
    for (size_t k = 0; k < want[0]->prompt[i].top.size(); ++k) {
      EXPECT_EQ(got[1]->prompt[i].top[k].id, want[0]->prompt[i].top[k].id);
      EXPECT_EQ(got[1]->prompt[i].top[k].logprob, want[0]->prompt[i].top[k].logprob);
    }
  }
  EXPECT_EQ(got[2]->prompt.size(), 11u);
}

// max_tokens 0: the prompt is scored and nothing is generated (the legacy API's way to
// score a text).
TEST(PromptOutputsSchedulerTest, PromptLogprobsWithNoTokensToGenerate) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<TokenId> prompt = StoryTokens(kStories, 14, kLongText);
  auto scheduler = MakeScheduler(kStories, Options());
  ASSERT_TRUE(scheduler);
  auto got =
      RunAll<PromptCollector>(*scheduler, {Echo(prompt, 0), Echo(prompt, 3), Echo({prompt[0]}, 0)});
  EXPECT_EQ(got[0]->finish.reason, FinishReason::kLength);
  EXPECT_TRUE(got[0]->ids.empty());
  EXPECT_EQ(got[0]->finish.usage.completion_tokens, 0);
  ASSERT_EQ(got[0]->prompt.size(), 13u);
  for (size_t i = 0; i < 13; ++i) EXPECT_EQ(got[0]->prompt[i].logprob, got[1]->prompt[i].logprob);
  EXPECT_EQ(got[2]->prompt_calls, 1);
  EXPECT_TRUE(got[2]->prompt.empty());
  EXPECT_EQ(got[2]->finish.reason, FinishReason::kLength);
}

// Requests that need every position skip the prefix cache's hits (they compute the whole
// prompt) but publish their full pages: a later generation request hits them.
TEST(PromptOutputsSchedulerTest, EveryPositionIsComputedAndPagesArePublished) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::vector<TokenId> prompt = StoryTokens(kStories, 40, kLongText);
  auto cold = MakeScheduler(kStories, Options());
  ASSERT_TRUE(cold);
  const std::vector<float> want =
      RunAll<PromptCollector>(*cold, {Embedding(prompt)})[0]->finish.embedding;

  auto scheduler = MakeScheduler(kStories, Options());
  ASSERT_TRUE(scheduler);
  auto first = RunAll<PromptCollector>(*scheduler, {Request(prompt, 2)});
  auto again = RunAll<PromptCollector>(*scheduler, {Embedding(prompt), Echo(prompt, 2)});
  EXPECT_EQ(again[0]->finish.usage.cached_tokens, 0);
  EXPECT_TRUE(Bitwise(again[0]->finish.embedding, want));
  EXPECT_EQ(again[1]->finish.usage.cached_tokens, 0);
  EXPECT_EQ(again[1]->prompt.size(), prompt.size() - 1);

  auto fresh = MakeScheduler(kStories, Options());
  ASSERT_TRUE(fresh);
  RunAll<PromptCollector>(*fresh, {Embedding(prompt)});
  auto after = RunAll<PromptCollector>(*fresh, {Request(prompt, 2)});
  EXPECT_EQ(after[0]->finish.usage.cached_tokens, 32);  // two full pages of 16
  ExpectSameOutput(*after[0], *first[0]);
}

TEST(PromptOutputsSchedulerTest, SubmitErrors) {
  SHARDLM_REQUIRE_FIXTURES();
  SchedulerOptions options = Options();
  options.n_ctx = 32;
  auto scheduler = MakeScheduler(kStories, options);
  ASSERT_TRUE(scheduler);
  // The whole context holds an embedding's prompt (nothing is generated after it).
  auto full =
      RunAll<PromptCollector>(*scheduler, {Embedding(StoryTokens(kStories, 32, kLongText))});
  EXPECT_EQ(full[0]->finish.reason, FinishReason::kStop);
  auto too_long = scheduler->Submit(Embedding(StoryTokens(kStories, 33, kLongText)), {});
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("context_length_exceeded"), std::string::npos);
  EngineRequest both = Embedding({1, 2});
  both.want_prompt_logprobs = true;
  EXPECT_EQ(scheduler->Submit(both, {}).status().code(), StatusCode::kInvalidArgument);

  options.embeddings = false;
  auto plain = MakeScheduler(kStories, options);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->info().embeddings);
  auto refused = plain->Submit(Embedding({1, 2, 3}), {});
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("--embeddings"), std::string::npos);
}

TEST(PromptOutputsSchedulerTest, CancellingFromThePromptLogprobsCallback) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = MakeScheduler(kStories, Options());
  ASSERT_TRUE(scheduler);
  PromptCollector c;
  RequestCallbacks callbacks = c.Callbacks();
  callbacks.on_prompt_logprobs = [](const std::vector<TokenEvent>&) { return false; };
  ASSERT_TRUE(scheduler->Submit(Echo(StoryTokens(kStories, 10, kLongText), 5), callbacks).ok());
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.finish.reason, FinishReason::kCancelled);
  EXPECT_TRUE(c.ids.empty());
}

}  // namespace prompt_outputs_scheduler_test
}  // namespace shardlm
