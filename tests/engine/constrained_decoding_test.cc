// Constrained decoding through the scheduler: logit_bias bans and forces tokens while the
// reported logprobs stay the model's; JSON Schema constraints on a random-weight model with
// the real Qwen3 vocabulary give output that parses and validates, for hand-written and
// random schemas (a fuzz test with temperature sampling and random seeds); a constrained
// request's tokens do not depend on what shares the batch; a grammar the vocabulary cannot
// continue ends the request with an error, not a crash.
#include <gtest/gtest.h>

#include <random>

#include "engine/scheduler_request.h"
#include "engine/scheduler_test_util.h"
#include "grammar/json_schema.h"
#include "grammar/schema_validator.h"
#include "grammar/token_vocabulary.h"
#include "support/sanitizer.h"

namespace shardlm {
namespace constrained_decoding_test {

using grammar::Json;
using scheduler_test_util::Collector;
using scheduler_test_util::Fixture;
using scheduler_test_util::kQwen;
using scheduler_test_util::RunAll;

constexpr char kQwenVocab[] = "qwen3-tiny-qwenvocab-q8_0.gguf";

SchedulerOptions Options(int n_parallel = 4) {
  return scheduler_test_util::TestOptions(n_parallel, 2048, 256);
}

std::vector<TokenId> ChatPrompt(const std::string& file, const std::string& user) {
  return Fixture(file).tokenizer->Encode(
      "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", false, true);
}

// Sampling over the whole masked distribution: the hardest case for the grammar.
SamplingParams Temperature(uint64_t seed) {
  return scheduler_test_util::WholeDistribution(1.0f, seed);
}

std::shared_ptr<const grammar::Grammar> SchemaGrammar(const Json& schema) {
  Result<grammar::Grammar> g = grammar::JsonSchemaGrammar(schema);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << schema.dump();
  return g.ok() ? std::make_shared<const grammar::Grammar>(std::move(g).value()) : nullptr;
}

TEST(LogitBias, BansAndForcesTokensButLogprobsStayTheModels) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = scheduler_test_util::MakeScheduler(kQwen, Options(2));
  ASSERT_NE(scheduler, nullptr);
  EngineRequest plain =
      scheduler_test_util::Request(scheduler_test_util::Encode(kQwen, "Hello", false), 6);
  const std::vector<TokenId> greedy = scheduler_test_util::RunOne(*scheduler, plain)->ids;
  ASSERT_EQ(greedy.size(), 6u);

  EngineRequest banned = plain;
  banned.logit_bias = {{greedy[0], -100.0f}};
  auto without = scheduler_test_util::RunOne(*scheduler, banned);
  EXPECT_NE(without->ids[0], greedy[0]);
  for (TokenId id : without->ids) EXPECT_NE(id, greedy[0]);

  EngineRequest forced = plain;
  const TokenId x = 'x';
  forced.logit_bias = {{x, 60.0f}, {x, 40.0f}};  // a repeated id adds up
  auto only_x = scheduler_test_util::RunOne(*scheduler, forced);
  EXPECT_EQ(only_x->ids, std::vector<TokenId>(6, x));
  // The model itself gives 'x' no special weight: its logprob is far from 0.
  EXPECT_LT(only_x->logprobs[0], -1.0f);

  EngineRequest bad = plain;
  bad.logit_bias = {{TokenId(Fixture(kQwen).tokenizer->n_vocab()), 1.0f}};
  Collector c;
  EXPECT_EQ(scheduler->Submit(bad, c.Callbacks()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ConstrainedDecoding, JsonSchemaOutputParsesAndValidates) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = scheduler_test_util::MakeScheduler(kQwenVocab, Options());
  ASSERT_NE(scheduler, nullptr);
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "city":{"type":"string","maxLength":12},"days":{"type":"integer"},
      "units":{"enum":["metric","imperial"]},"alerts":{"type":"array","maxItems":2,
      "items":{"type":"object","properties":{"level":{"type":"integer"},"ok":{"type":"boolean"}},
      "required":["level","ok"],"additionalProperties":false}}},
      "required":["city","days","units","alerts"],"additionalProperties":false})");
  EngineRequest request;
  request.prompt = ChatPrompt(kQwenVocab, "Weather as JSON please.");
  request.max_tokens = 400;
  request.grammar = SchemaGrammar(schema);
  std::vector<EngineRequest> requests;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    request.sampling = Temperature(seed);
    requests.push_back(request);
  }
  for (auto& out : RunAll(*scheduler, requests)) {
    EXPECT_EQ(out->finish.reason, FinishReason::kStop) << out->text;
    const Json value = Json::parse(out->text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(value.is_discarded()) << out->text;
    EXPECT_EQ(grammar::testing::Violation(value, schema, schema), "") << out->text;
  }
}

// The fuzz test: random schemas of the whole subset, random seeds, temperature sampling
// over the masked distribution. Every output must end by itself and validate. A random
// model rarely closes a string of no maximum length or an object of any members (a quote or
// a brace is a few of 150k tokens): requests with those get a logit_bias toward closing
// tokens, so they end within max_tokens too.
TEST(ConstrainedDecoding, RandomSchemasAlwaysGiveValidOutput) {
  SHARDLM_REQUIRE_FIXTURES();
  auto scheduler = scheduler_test_util::MakeScheduler(kQwenVocab, Options());
  ASSERT_NE(scheduler, nullptr);
  const Tokenizer& tokenizer = *Fixture(kQwenVocab).tokenizer;
  std::vector<std::pair<TokenId, float>> closers;
  // The quote most: inside a string a brace or bracket is text, and a random model that
  // repeats one ("]]]]…") would write it for a thousand tokens before it closes the string.
  for (const auto& [text, bias] :
       {std::pair<const char*, float>{"\"", 60.0f}, {"}", 50.0f}, {"]", 50.0f}}) {
    closers.push_back({tokenizer.FindToken(text), bias});
  }
  for (const auto& [id, bias] : closers) ASSERT_GE(id, 0);
  grammar::testing::RandomSchemas schemas(2024);
  std::mt19937_64 seeds(99);
  constexpr int kSchemas = shardlm::testing::CasesUnlessSanitized(64);
  std::vector<Json> docs;
  std::vector<EngineRequest> requests;
  for (int i = 0; i < kSchemas; ++i) {
    const bool unbounded = i % 2 == 1;
    docs.push_back(schemas.Document(unbounded));
    EngineRequest request;
    request.prompt = ChatPrompt(kQwenVocab, "JSON:");
    request.max_tokens = 1500;
    request.sampling = Temperature(seeds());
    if (unbounded) request.logit_bias = closers;
    request.grammar = SchemaGrammar(docs.back());
    ASSERT_NE(request.grammar, nullptr);
    requests.push_back(std::move(request));
  }
  auto outputs = RunAll(*scheduler, requests);
  for (int i = 0; i < kSchemas; ++i) {
    const Collector& out = *outputs[size_t(i)];
    SCOPED_TRACE(docs[size_t(i)].dump());
    fprintf(stderr, "TOKENS %d %d\n", i, out.finish.usage.completion_tokens);
    EXPECT_EQ(out.finish.reason, FinishReason::kStop) << out.text;
    const Json value = Json::parse(out.text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << out.text;
    EXPECT_EQ(grammar::testing::Violation(value, docs[size_t(i)], docs[size_t(i)]), "") << out.text;
  }
}

TEST(ConstrainedDecoding, TokensDoNotDependOnWhatSharesTheBatch) {
  SHARDLM_REQUIRE_FIXTURES();
  const Json schema = Json::parse(R"({"type":"object","properties":{"a":{"type":"string",
      "maxLength":20},"b":{"type":"array","items":{"type":"number"},"maxItems":3}},
      "required":["a","b"]})");
  EngineRequest request;
  request.prompt = ChatPrompt(kQwenVocab, "Give me JSON.");
  request.max_tokens = 200;
  request.sampling = Temperature(7);
  request.want_logprobs = true;
  request.grammar = SchemaGrammar(schema);

  auto alone = scheduler_test_util::MakeScheduler(kQwenVocab, Options(1));
  ASSERT_NE(alone, nullptr);
  auto want = RunAll(*alone, {request});

  auto shared = scheduler_test_util::MakeScheduler(kQwenVocab, Options(4));
  ASSERT_NE(shared, nullptr);
  EngineRequest other = request;
  other.grammar = SchemaGrammar(Json::parse(R"({"type":"array","items":{"type":"integer"}})"));
  EngineRequest free = request;
  free.grammar = nullptr;
  for (auto* r : {&other, &free}) r->sampling.seed = 11;
  auto got = RunAll(*shared, {other, request, free, request});
  for (size_t i : {size_t(1), size_t(3)}) {
    EXPECT_EQ(got[i]->ids, want[0]->ids);
    EXPECT_EQ(got[i]->logprobs, want[0]->logprobs);  // bitwise
    EXPECT_EQ(got[i]->text, want[0]->text);
  }
}

// A two-token vocabulary ("a", "b") and EOG: a grammar that needs "c" next has no token.
class TinyTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> Encode(std::string_view, bool, bool) const override { return {0}; }
  std::string Piece(TokenId id, bool) const override { return id == 0 ? "a" : id == 1 ? "b" : ""; }
  int32_t n_vocab() const override { return 3; }
  TokenId bos() const override { return -1; }
  TokenId eos() const override { return 2; }
  bool add_bos() const override { return false; }
  bool IsEog(TokenId id) const override { return id == 2; }
  std::string_view TokenText(TokenId id) const override { return id == 0 ? "a" : "b"; }
};

TEST(ConstrainedDecoding, AGrammarNoTokenCanContinueEndsWithAnError) {
  TinyTokenizer tokenizer;
  grammar::GrammarBuilder b;
  const grammar::RuleId root = b.AddRule("root");
  b.AddAlternative(root, b.Literal("ac"));
  auto g = std::make_shared<const grammar::Grammar>(b.Build(root).value());
  auto automaton = std::make_shared<grammar::TokenAutomaton>(
      g, grammar::TokenVocabulary::FromTokenizer(tokenizer));
  EngineRequest request;
  request.prompt = {0};
  request.sampling.temperature = 0.0f;
  request.grammar = g;
  bool finished = false;
  RequestCallbacks callbacks;
  callbacks.on_token = [](const TokenEvent&) { return true; };
  callbacks.on_finish = [&](const FinishEvent&) { finished = true; };
  ActiveRequest active(1, request, callbacks, tokenizer, 3, SchedulerClock::now(),
                       std::make_unique<grammar::TokenMatcher>(automaton));
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f};  // the model prefers "b"
  EXPECT_EQ(active.OnLogits(logits, 2, 16), std::nullopt);
  EXPECT_EQ(active.last_token(), 0);  // "a": the only token the grammar allows
  EXPECT_EQ(active.OnLogits(logits, 3, 16), FinishReason::kError);
  EXPECT_NE(active.error().message().find("allows no token"), std::string::npos)
      << active.error().message();
  active.Finish(FinishReason::kError, active.error(), false);
  EXPECT_TRUE(finished);
}

}  // namespace constrained_decoding_test
}  // namespace shardlm
