// Request parsing (typed fields, errors naming the param, a fuzz of random mutations) and
// the chat output parser (reasoning, tool calls, tags split across deltas).
#include "server/openai_types.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "server/chat_format.h"
#include "server/json_mutation.h"
#include "server/mock_engine.h"
#include "support/fixtures.h"
#include "support/sanitizer.h"

namespace shardlm::server {
namespace openai_types_test {

TEST(OpenAiTypes, ChatRequestFields) {
  Json body = Json::parse(R"({
    "model": "x", "stream": true, "stream_options": {"include_usage": true},
    "max_completion_tokens": 7, "stop": "END", "temperature": 0, "top_p": 0.5, "top_k": 3,
    "min_p": 0.1, "seed": 42, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repeat_penalty": 1.1, "logprobs": true, "top_logprobs": 3, "unknown_field": [1],
    "messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"k\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "r"}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"})");
  std::string param;
  auto r = ChatCompletionRequestFromJSON(body, &param);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GenerationOptions& o = r->options;
  EXPECT_TRUE(o.stream);
  EXPECT_TRUE(o.include_usage);
  EXPECT_EQ(o.max_tokens, 7);
  EXPECT_EQ(o.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(o.sampling.temperature, 0.0f);
  EXPECT_EQ(o.sampling.top_k, 3);
  EXPECT_EQ(o.sampling.seed, 42u);
  EXPECT_TRUE(o.seed_given);
  EXPECT_TRUE(o.logprobs);
  EXPECT_EQ(o.top_logprobs, 3);
  EXPECT_EQ(r->messages[1]["content"], "ab");
  EXPECT_EQ(r->messages[2]["content"], "");  // a missing assistant content is "", not None
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["arguments"]["k"], 1);
  EXPECT_EQ(r->tools.size(), 1u);
}

TEST(OpenAiTypes, ErrorsNameTheParam) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_k":"3"})", "top_k"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":50})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":"hi"})", "messages"},
  };
  for (const Case& c : cases) {
    std::string param;
    auto r = ChatCompletionRequestFromJSON(Json::parse(c.body), &param);
    EXPECT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(param, c.param) << c.body << ": " << r.status().message();
  }
}

TEST(OpenAiTypes, DeepNestingIsRefused) {
  std::string deep =
      R"({"prompt":"x","tools":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(ParseBody(deep).ok());
  std::string fine =
      R"({"a":)" + std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']') + "}";
  EXPECT_TRUE(ParseBody(fine).ok()) << ParseBody(fine).status().message();
  EXPECT_FALSE(ParseBody("[1]").ok());
  EXPECT_FALSE(ParseBody("{").ok());
}

TEST(OpenAiTypes, CompletionPrompts) {
  auto r = CompletionRequestFromJSON(Json::parse(R"({"prompt":"hi","logprobs":2})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt, "hi");
  EXPECT_EQ(r->options.top_logprobs, 2);
  r = CompletionRequestFromJSON(Json::parse(R"({"prompt":[1,2,3]})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
  r = CompletionRequestFromJSON(Json::parse(R"({"prompt":["one"]})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt, "one");
  EXPECT_FALSE(CompletionRequestFromJSON(Json::parse(R"({"prompt":[-1]})")).ok());
  EXPECT_FALSE(CompletionRequestFromJSON(Json::parse(R"({"prompt":{}})")).ok());
  EXPECT_FALSE(CompletionRequestFromJSON(Json::parse(R"({})")).ok());
  // OpenAI's legacy default length, unless the request says otherwise (-1: until done).
  EXPECT_EQ(r->options.max_tokens, kDefaultCompletionMaxTokens);
  r = CompletionRequestFromJSON(Json::parse(R"({"prompt":"x","max_tokens":-1})"));
  EXPECT_EQ(r->options.max_tokens, -1);
  r = CompletionRequestFromJSON(Json::parse(R"({"prompt":"x","max_tokens":null})"));
  EXPECT_EQ(r->options.max_tokens, kDefaultCompletionMaxTokens);
  // Several prompts: a 400 that says so, not "expected an integer".
  std::string param;
  r = CompletionRequestFromJSON(Json::parse(R"({"prompt":["a","b"]})"), &param);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(param, "prompt");
  EXPECT_NE(r.status().message().find("2 prompts in one request"), std::string::npos);
  EXPECT_FALSE(CompletionRequestFromJSON(Json::parse(R"({"prompt":[[1],[2]]})")).ok());
}

TEST(OpenAiTypes, FuzzParserNeverCrashes) {
  const std::string seeds[] = {
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5,"stop":["a"],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}})",
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"r"}]}],"tools":[{"type":"function","function":{"name":"f"}}],"logprobs":true,"top_logprobs":2})",
      R"({"prompt":[1,2,3],"seed":7,"top_k":4,"min_p":0.1,"logprobs":1,"echo":true})",
      R"({"prompt":"text","n":1,"presence_penalty":1,"frequency_penalty":1})",
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"[]"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]})",
  };
  // The request that once killed the server (arguments nested 200000 deep), as is: it is
  // too big to be a seed of mutations as well.
  const std::string killer =
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":")" +
      std::string(200000, '[') + std::string(200000, ']') + R"("}}]}]})";
  std::mt19937 rng(1234);
  MockTokenizer tokenizer;
  auto formatter = ChatFormatter::Create("", tokenizer);
  ASSERT_TRUE(formatter.ok());
  int ok = 0;
  for (int iter = 0; iter < shardlm::testing::CasesUnlessSanitized(20000); ++iter) {
    const std::string& seed = seeds[iter % std::size(seeds)];
    std::string text = iter == 0 ? killer : Mutate(seed, rng);
    Result<Json> body = ParseBody(text);
    if (!body.ok()) continue;
    std::string param;
    auto chat = ChatCompletionRequestFromJSON(body.value(), &param);
    if (chat.ok()) {
      ++ok;
      (void)formatter->Render(chat.value());
    }
    auto completion = CompletionRequestFromJSON(body.value(), &param);
    if (completion.ok()) ++ok;
    (void)TokenizeRequestFromJSON(body.value());
    (void)DetokenizeRequestFromJSON(body.value());
  }
  EXPECT_GT(ok, 100);
}

// The same mutations through every real model template of the fixtures: a request that
// parses renders or fails with a Status, never crashes.
TEST(OpenAiTypes, FuzzRealTemplatesNeverCrash) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string seed =
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},)"
      R"({"role":"assistant","content":"","tool_calls":[{"id":"1","type":"function",)"
      R"("function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool",)"
      R"("tool_call_id":"1","content":"r"}],"tools":[{"type":"function","function":)"
      R"({"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}]})";
  MockTokenizer tokenizer;
  std::mt19937 rng(99);
  int templates = 0;
  int rendered = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(shardlm::testing::FixturePath("templates"))) {
    if (entry.path().extension() != ".jinja") continue;
    auto formatter =
        ChatFormatter::Create(shardlm::testing::ReadTextFile(entry.path().string()), tokenizer);
    ASSERT_TRUE(formatter.ok()) << entry.path() << ": " << formatter.status().message();
    ++templates;
    for (int iter = 0; iter < shardlm::testing::CasesUnlessSanitized(2000); ++iter) {
      Result<Json> body = ParseBody(iter == 0 ? seed : Mutate(seed, rng));
      if (!body.ok()) continue;
      auto chat = ChatCompletionRequestFromJSON(body.value());
      if (chat.ok() && formatter->Render(chat.value()).ok()) ++rendered;
    }
  }
  EXPECT_GT(templates, 5);
  EXPECT_GT(rendered, 0);  // some templates refuse tool turns (Gemma) or short ids (Mistral)
}

// The standing prefix (what a bounded KV pool pins): the leading system turn and the tools,
// the tokens the whole prompt shares with them rendered alone.
TEST(ChatFormatter, TheStandingPrefixIsTheSystemTurnAndTheTools) {
  MockTokenizer tokenizer;
  auto chatml = ChatFormatter::Create("", tokenizer);
  ASSERT_TRUE(chatml.ok());
  auto request = ChatCompletionRequestFromJSON(Json::parse(
      R"({"messages":[{"role":"system","content":"SYSTEM-RULES"},{"role":"user","content":"hi"}]})"));
  ASSERT_TRUE(request.ok());
  auto prompt = chatml->Tokenize(*request, tokenizer);
  ASSERT_TRUE(prompt.ok());
  const int32_t n = chatml->StandingPrefix(*request, prompt->tokens, tokenizer);
  std::string prefix;
  for (int32_t i = 0; i < n; ++i) prefix += tokenizer.Piece(prompt->tokens[i], true);
  EXPECT_EQ(prefix, "<|im_start|>system\nSYSTEM-RULES<|im_end|>\n");
  auto no_system = ChatCompletionRequestFromJSON(
      Json::parse(R"({"messages":[{"role":"user","content":"hi"}]})"));
  ASSERT_TRUE(no_system.ok());
  EXPECT_EQ(chatml->StandingPrefix(*no_system, chatml->Tokenize(*no_system, tokenizer)->tokens,
                                   tokenizer),
            0);
}

// Every fixture template: the prefix holds the system text and stops before the question.
TEST(ChatFormatter, EveryTemplatesStandingPrefixStopsBeforeTheQuestion) {
  SHARDLM_REQUIRE_FIXTURES();
  MockTokenizer tokenizer;
  auto with_tools = ChatCompletionRequestFromJSON(Json::parse(
      R"({"messages":[{"role":"system","content":"SYSTEM-RULES"},{"role":"user","content":"QUESTION"}],)"
      R"("tools":[{"type":"function","function":{"name":"lookup","parameters":{}}}]})"));
  ASSERT_TRUE(with_tools.ok());
  int pinned = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(shardlm::testing::FixturePath("templates"))) {
    if (entry.path().extension() != ".jinja") continue;
    SCOPED_TRACE(entry.path().filename().string());
    auto formatter =
        ChatFormatter::Create(shardlm::testing::ReadTextFile(entry.path().string()), tokenizer);
    ASSERT_TRUE(formatter.ok());
    auto tokens = formatter->Tokenize(*with_tools, tokenizer);
    if (!tokens.ok()) continue;
    const int32_t end = formatter->StandingPrefix(*with_tools, tokens->tokens, tokenizer);
    std::string text;
    for (int32_t i = 0; i < end; ++i) text += tokenizer.Piece(tokens->tokens[i], true);
    EXPECT_EQ(text.find("QUESTION"), std::string::npos) << text;
    if (text.find("SYSTEM-RULES") != std::string::npos) ++pinned;
  }
  EXPECT_GE(pinned, 5);
}

TEST(OutputParser, SplitsReasoningContentAndTools) {
  OutputParser p(/*in_reasoning=*/false, /*parse_tools=*/true, "call_");
  std::string text =
      "<think>\nplan\n</think>\n\nHello <tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n"
      "</tool_call>";
  // Feed one byte at a time: tags split across pushes must still be recognized.
  OutputDelta all;
  for (char c : text) {
    OutputDelta d = p.Push(std::string(1, c));
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (auto& t : d.tool_calls) all.tool_calls.push_back(t);
  }
  OutputDelta d = p.Finish();
  all.content += d.content;
  EXPECT_EQ(all.reasoning, "plan\n");
  EXPECT_EQ(all.content, "Hello ");
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "f");
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(all.tool_calls[0].id, "call_0");
}

TEST(OutputParser, PromptOpenedThinkAndBadToolJson) {
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<think>\n\n</think>\n\n"));
  OutputParser p(/*in_reasoning=*/true, /*parse_tools=*/true, "c");
  OutputDelta d = p.Push("why</think>ok<tool_call>not json</tool_call>");
  EXPECT_EQ(d.reasoning, "why");
  EXPECT_EQ(d.content, "ok<tool_call>not json</tool_call>");
  OutputParser no_tools(false, false, "c");
  d = no_tools.Push("<tool_call>{\"name\":\"f\"}</tool_call>");
  d.content += no_tools.Finish().content;
  EXPECT_EQ(d.content, "<tool_call>{\"name\":\"f\"}</tool_call>");
  EXPECT_TRUE(d.tool_calls.empty());
}

}  // namespace openai_types_test
}  // namespace shardlm::server

namespace shardlm::server {
namespace openai_types_test {

ChatCompletionRequest MustChat(const std::string& extra) {
  auto r = ChatCompletionRequestFromJSON(
      Json::parse(R"({"messages":[{"role":"user","content":"x"}],)"
                  R"("tools":[{"type":"function","function":{"name":"get"}}])" +
                  extra + "}"));
  EXPECT_TRUE(r.ok()) << extra << ": " << r.status().message();
  return r.ok() ? std::move(r).value() : ChatCompletionRequest{};
}

Status ChatError(const std::string& extra, std::string* param) {
  auto r = ChatCompletionRequestFromJSON(
      Json::parse(R"({"messages":[{"role":"user","content":"x"}],)"
                  R"("tools":[{"type":"function","function":{"name":"get"}}])" +
                  extra + "}"),
      param);
  return r.ok() ? Status::Ok() : r.status();
}

TEST(OpenAiTypes, ToolChoiceModesAndNames) {
  EXPECT_EQ(MustChat("").tool_choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(MustChat(R"(,"tool_choice":"required")").tool_choice.mode, ToolChoice::Mode::kRequired);
  ChatCompletionRequest named =
      MustChat(R"(,"tool_choice":{"type":"function","function":{"name":"get"}})");
  EXPECT_EQ(named.tool_choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(named.tool_choice.function, "get");
  ChatCompletionRequest none = MustChat(R"(,"tool_choice":"none")");
  EXPECT_TRUE(none.tools.is_null());
  std::string param;
  Status st = ChatError(R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})", &param);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(param, "tool_choice");
  EXPECT_NE(st.message().find("no tool is named 'nope'"), std::string::npos);
  EXPECT_FALSE(ChatError(R"(,"tool_choice":"sometimes")", &param).ok());
  auto no_tools = ChatCompletionRequestFromJSON(
      Json::parse(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})"),
      &param);
  EXPECT_FALSE(no_tools.ok());
  EXPECT_EQ(param, "tool_choice");
}

TEST(OpenAiTypes, ResponseFormats) {
  EXPECT_EQ(MustChat("").options.response_format.type, ResponseFormat::Type::kText);
  EXPECT_EQ(MustChat(R"(,"response_format":{"type":"json_object"})").options.response_format.type,
            ResponseFormat::Type::kJsonObject);
  ChatCompletionRequest js = MustChat(
      R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,)"
      R"("schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}})");
  EXPECT_EQ(js.options.response_format.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(js.options.response_format.name, "p");
  EXPECT_TRUE(js.options.response_format.strict);
  EXPECT_EQ(js.options.response_format.schema["required"][0], "a");
  std::string param;
  for (const char* bad : {R"(,"response_format":{"type":"yaml"})", R"(,"response_format":"json")",
                          R"(,"response_format":{"type":"json_schema"})",
                          R"(,"response_format":{"type":"json_schema","json_schema":{}})"}) {
    EXPECT_FALSE(ChatError(bad, &param).ok()) << bad;
    EXPECT_EQ(param, "response_format") << bad;
  }
}

TEST(OpenAiTypes, LogitBias) {
  ChatCompletionRequest r = MustChat(R"(,"logit_bias":{"17":-100,"42":5.5})");
  ASSERT_EQ(r.options.logit_bias.size(), 2u);
  EXPECT_EQ(r.options.logit_bias[0], (std::pair<TokenId, float>{17, -100.0f}));
  EXPECT_EQ(r.options.logit_bias[1], (std::pair<TokenId, float>{42, 5.5f}));
  std::string param;
  for (const char* bad :
       {R"(,"logit_bias":{"x":1})", R"(,"logit_bias":{"1":101})", R"(,"logit_bias":{"-3":1})",
        R"(,"logit_bias":{"1":"a"})", R"(,"logit_bias":[1])"}) {
    EXPECT_FALSE(ChatError(bad, &param).ok()) << bad;
    EXPECT_EQ(param, "logit_bias") << bad;
  }
}

TEST(OpenAiTypes, PinRangesAreAnExtensionField) {
  ChatCompletionRequest r = MustChat(R"(,"pin":[[0,1024],[2048,2050]])");
  EXPECT_EQ(r.options.pins, (std::vector<std::pair<int32_t, int32_t>>{{0, 1024}, {2048, 2050}}));
  EXPECT_TRUE(MustChat("").options.pins.empty());
  std::string param;
  for (const char* bad : {R"(,"pin":[[5,5]])", R"(,"pin":[[-1,4]])", R"(,"pin":[[1,2,3]])",
                          R"(,"pin":[1,2])", R"(,"pin":{"a":1})", R"(,"pin":[["0","4"]])"}) {
    EXPECT_FALSE(ChatError(bad, &param).ok()) << bad;
    EXPECT_EQ(param.substr(0, 3), "pin") << bad;
  }
  std::string many = R"(,"pin":[)";
  for (size_t i = 0; i <= kMaxPins; ++i) many += (i ? ",[0,1]" : "[0,1]");
  EXPECT_FALSE(ChatError(many + "]", &param).ok());
}

}  // namespace openai_types_test
}  // namespace shardlm::server
