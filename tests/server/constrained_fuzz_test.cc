// The server's constraints on a random-weight model with the real Qwen3 vocabulary: random
// tool sets (parameters drawn from the whole schema subset) with a forced call, required or
// named, in the JSON syntax and in Gemma 4's, and random response_format schemas with tools
// offered; temperature sampling, random seeds. What a client would get is checked: the OutputParser
// reads back exactly one call of an offered tool (the named one when named) whose arguments
// validate against its parameters, or content that parses and validates, and nothing else. A random
// model rarely closes a string of no maximum length or an object of any members: requests with
// those get a logit_bias toward closing tokens (the quote most), so they end within max_tokens too.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "engine/scheduler_test_util.h"
#include "grammar/schema_validator.h"
#include "server/chat_format.h"
#include "server/output_constraint.h"

namespace shardlm::server {
namespace constrained_fuzz_test {

using grammar::testing::RandomSchemas;
using grammar::testing::Violation;

constexpr char kQwenVocab[] = "qwen3-tiny-qwenvocab-q8_0.gguf";
// Requests per run: all wait in the engine's queue at once (its default bound is 64).
constexpr int kRequests = 48;

// One request: what was asked, and the text the engine wrote (its token events' and the
// finish event's, as the session reads them).
struct Case {
  ChatCompletionRequest chat;
  EngineRequest request;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string text;
  FinishEvent finish;

  RequestCallbacks Callbacks() {
    RequestCallbacks callbacks;
    callbacks.on_token = [this](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mu);
      text += event.text;
      return true;
    };
    callbacks.on_finish = [this](const FinishEvent& event) {
      std::lock_guard<std::mutex> lock(mu);
      text += event.text;
      finish = event;
      done = true;
      cv.notify_all();
    };
    return callbacks;
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; });
  }
};

// One or more tools with random parameters; a forced call, required or named.
Json ToolCallBody(RandomSchemas& schemas, std::mt19937_64& rng, bool unbounded) {
  const int n_tools = 1 + int(rng() % 3);
  Json tools = Json::array();
  for (int t = 0; t < n_tools; ++t) {
    tools.push_back(
        {{"type", "function"},
         {"function",
          {{"name", "tool_" + std::to_string(t)}, {"parameters", schemas.Document(unbounded)}}}});
  }
  Json body = {{"messages", {{{"role", "user"}, {"content", "call"}}}}, {"tools", tools}};
  if (rng() % 2) {
    body["tool_choice"] = "required";
  } else {
    const std::string name = "tool_" + std::to_string(rng() % uint64_t(n_tools));
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  }
  return body;
}

// A json_schema response_format, with a tool offered (so content strings avoid its tag).
Json ResponseFormatBody(RandomSchemas& schemas, bool unbounded) {
  return {{"messages", {{{"role", "user"}, {"content", "json"}}}},
          {"tools", {{{"type", "function"}, {"function", {{"name", "unused"}}}}}},
          {"response_format",
           {{"type", "json_schema"},
            {"json_schema", {{"name", "x"}, {"schema", schemas.Document(unbounded)}}}}}};
}

// The parameters of the tool a call names (null when no such tool was offered).
Json ParametersOf(const ChatCompletionRequest& chat, const std::string& name) {
  for (const Json& tool : chat.tools) {
    if (tool["function"]["name"] == name) return tool["function"]["parameters"];
  }
  return nullptr;
}

// What the client gets from `c`, checked against what it asked for (`tags`: the tool-call
// tags of the syntax that was forced).
void Check(const Case& c, ToolCallTags tags = kToolCallTags) {
  SCOPED_TRACE(c.text);
  EXPECT_EQ(c.finish.reason, FinishReason::kStop);
  OutputParser parser(/*in_reasoning=*/false, /*parse_tools=*/true, "call_", kThinkTags, Json(),
                      tags);
  OutputDelta out = parser.Push(c.text);
  OutputDelta rest = parser.Finish();
  out.content += rest.content;
  out.reasoning += rest.reasoning;
  out.tool_calls.insert(out.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
  EXPECT_EQ(out.reasoning, "");
  if (c.chat.tool_choice.mode == ToolChoice::Mode::kAuto) {
    EXPECT_TRUE(out.tool_calls.empty());
    const Json& schema = c.chat.options.response_format.schema;
    const Json value = Json::parse(out.content, nullptr, false);
    ASSERT_FALSE(value.is_discarded());
    EXPECT_EQ(Violation(value, schema, schema), "");
    return;
  }
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  const ToolCall& call = out.tool_calls[0];
  if (c.chat.tool_choice.mode == ToolChoice::Mode::kFunction) {
    EXPECT_EQ(call.name, c.chat.tool_choice.function);
  }
  const Json parameters = ParametersOf(c.chat, call.name);
  ASSERT_FALSE(parameters.is_null()) << call.name;
  const Json arguments = Json::parse(call.arguments, nullptr, false);
  ASSERT_TRUE(arguments.is_object()) << call.arguments;
  EXPECT_EQ(Violation(arguments, parameters, parameters), "") << call.arguments;
}

// The engine, a scheduler over the real Qwen3 vocabulary, and its tokenizer.
struct Engine {
  std::unique_ptr<Scheduler> scheduler;
  const Tokenizer* tokenizer = nullptr;
};

Engine MakeEngine() {
  const SchedulerOptions options = scheduler_test_util::TestOptions(4, 2048, 512);
  Engine engine;
  engine.scheduler = scheduler_test_util::MakeScheduler(kQwenVocab, options);
  engine.tokenizer = scheduler_test_util::Fixture(kQwenVocab).tokenizer.get();
  return engine;
}

// A request of `c` under grammar `g`: temperature sampling over the whole distribution.
void Prepare(Case& c, const Tokenizer& tokenizer, OutputGrammar g, uint64_t seed) {
  c.request.prompt =
      tokenizer.Encode("<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n", false, true);
  c.request.max_tokens = 1500;
  c.request.sampling.temperature = 1.0f;
  c.request.sampling.top_k = 0;
  c.request.sampling.top_p = 1.0f;
  c.request.sampling.min_p = 0.0f;
  c.request.sampling.seed = seed;
  c.request.grammar = std::move(g);
}

void RunCases(Scheduler& scheduler, std::vector<Case>& cases) {
  for (Case& c : cases) {
    Result<RequestId> id = scheduler.Submit(c.request, c.Callbacks());
    ASSERT_TRUE(id.ok()) << id.status().message();
  }
  for (Case& c : cases) ASSERT_TRUE(c.Wait());
}

TEST(ConstrainedFuzz, ForcedCallsAndFormatsAlwaysReachTheClientValid) {
  SHARDLM_REQUIRE_FIXTURES();
  Engine engine = MakeEngine();
  ASSERT_NE(engine.scheduler, nullptr);
  std::vector<std::pair<TokenId, float>> closers;
  for (const auto& [text, bias] :
       {std::pair<const char*, float>{"\"", 60.0f}, {"}", 50.0f}, {"]", 50.0f}}) {
    closers.push_back({engine.tokenizer->FindToken(text), bias});
    ASSERT_GE(closers.back().first, 0) << text;
  }
  RandomSchemas schemas(77);
  std::mt19937_64 rng(5);
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kJson;
  std::vector<Case> cases(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    Case& c = cases[size_t(i)];
    const bool unbounded = i % 4 >= 2;
    const Json body =
        i % 2 ? ResponseFormatBody(schemas, unbounded) : ToolCallBody(schemas, rng, unbounded);
    std::string param;
    Result<ChatCompletionRequest> chat = ChatCompletionRequestFromJSON(body, &param);
    ASSERT_TRUE(chat.ok()) << chat.status().message();
    c.chat = std::move(chat).value();
    Result<OutputGrammar> g = ChatOutputConstraint(c.chat, context, &param);
    ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << body.dump();
    Prepare(c, *engine.tokenizer, std::move(g).value(), rng());
    if (unbounded) c.request.logit_bias = closers;
  }
  RunCases(*engine.scheduler, cases);
  for (const Case& c : cases) Check(c);
}

// Gemma 4's syntax forced on the same random tool sets (bounded ones: a random model rarely
// ends a raw string of no maximum length): the parser reads one valid call out of each.
TEST(ConstrainedFuzz, ForcedGemmaCallsAlwaysReachTheClientValid) {
  SHARDLM_REQUIRE_FIXTURES();
  Engine engine = MakeEngine();
  ASSERT_NE(engine.scheduler, nullptr);
  RandomSchemas schemas(91);
  std::mt19937_64 rng(17);
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kGemma;
  context.tool_call_tags = kGemmaToolCallTags;
  std::vector<Case> cases(kRequests / 2);
  for (Case& c : cases) {
    const Json body = ToolCallBody(schemas, rng, /*unbounded=*/false);
    std::string param;
    Result<ChatCompletionRequest> chat = ChatCompletionRequestFromJSON(body, &param);
    ASSERT_TRUE(chat.ok()) << chat.status().message();
    c.chat = std::move(chat).value();
    Result<OutputGrammar> g = ChatOutputConstraint(c.chat, context, &param);
    ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << body.dump();
    Prepare(c, *engine.tokenizer, std::move(g).value(), rng());
  }
  RunCases(*engine.scheduler, cases);
  for (const Case& c : cases) Check(c, kGemmaToolCallTags);
}

}  // namespace constrained_fuzz_test
}  // namespace shardlm::server
