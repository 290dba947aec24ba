// Output constraints from requests: which requests get one, what their grammars accept
// (JSON objects, schema values, tool calls in the syntax the fixture Qwen3 template writes
// and OutputParser reads, free reasoning before them), which tags their strings avoid,
// refusals that name the parameter and the schema path as each API calls them, and which
// chat templates write tool calls a grammar can force. Through HTTP:
// constrained_http_test.cc.
#include "server/output_constraint.h"

#include <gtest/gtest.h>

#include "grammar/grammar_test_util.h"
#include "server/anthropic_api.h"
#include "server/chat_format.h"
#include "server/mock_engine.h"
#include "server/responses_api.h"
#include "support/fixtures.h"

namespace shardlm::server {
namespace output_constraint_test {

using grammar::testing::Accepts;
using grammar::testing::AcceptsPrefix;

ChatCompletionRequest Chat(const char* body) {
  std::string param;
  Result<ChatCompletionRequest> r = ChatCompletionRequestFromJSON(Json::parse(body), &param);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : ChatCompletionRequest{};
}

// A template that writes tool calls OutputParser reads, as Qwen3's does.
ConstraintContext Context(bool in_reasoning = false) {
  ConstraintContext context;
  context.in_reasoning = in_reasoning;
  context.tool_call_syntax = ToolCallSyntax::kJson;
  return context;
}

OutputGrammar ChatGrammar(const char* body, bool in_reasoning = false) {
  std::string param;
  Result<OutputGrammar> g = ChatOutputConstraint(Chat(body), Context(in_reasoning), &param);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : nullptr;
}

constexpr char kTools[] = R"("tools":[
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])";

std::string WithTools(const std::string& rest) {
  return std::string(R"({"messages":[{"role":"user","content":"hi"}],)") + kTools + rest + "}";
}

TEST(OutputConstraint, PlainRequestsHaveNone) {
  EXPECT_EQ(ChatGrammar(R"({"messages":[{"role":"user","content":"hi"}]})"), nullptr);
  EXPECT_EQ(ChatGrammar(R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"text"}})"),
            nullptr);
  EXPECT_EQ(ChatGrammar(WithTools("").c_str()), nullptr);  // tool_choice auto
  EXPECT_EQ(ChatGrammar(WithTools(R"(,"tool_choice":"none")").c_str()), nullptr);
}

TEST(OutputConstraint, JsonObjectAndSchema) {
  OutputGrammar object = ChatGrammar(R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_object"}})");
  ASSERT_NE(object, nullptr);
  EXPECT_TRUE(Accepts(*object, R"({"a": [1, {"b": null}]})"));
  EXPECT_FALSE(Accepts(*object, "[1]"));
  EXPECT_FALSE(AcceptsPrefix(*object, " {"));  // no text before the value

  OutputGrammar schema = ChatGrammar(R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,
      "schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],
      "additionalProperties":false}}}})");
  ASSERT_NE(schema, nullptr);
  EXPECT_TRUE(Accepts(*schema, R"({"n": 3})"));
  EXPECT_FALSE(Accepts(*schema, R"({"n": "3"})"));

  std::string param;
  CompletionRequest completion;
  completion.options.response_format.type = ResponseFormat::Type::kJsonSchema;
  completion.options.response_format.schema = Json::parse(R"({"type":"array","maxItems":1})");
  Result<OutputGrammar> g = CompletionOutputConstraint(completion, &param);
  ASSERT_TRUE(g.ok() && *g) << g.status().message();
  EXPECT_TRUE(Accepts(**g, "[true]"));
  EXPECT_FALSE(Accepts(**g, "[1,2]"));
}

TEST(OutputConstraint, ContentStringsAvoidTheTagsTheParserReadsThere) {
  OutputGrammar g = ChatGrammar(WithTools(R"(,"response_format":{"type":"json_object"})").c_str());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, R"({"a": "</think> and </tool_call> are harmless in content"})"));
  EXPECT_FALSE(AcceptsPrefix(*g, R"({"a": "x <think>)"));
  EXPECT_FALSE(AcceptsPrefix(*g, R"({"a": "x <tool_call>)"));
}

TEST(OutputConstraint, NamedToolCall) {
  OutputGrammar g = ChatGrammar(
      WithTools(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})").c_str());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Paris\", \"days\": 2}}\n</tool_call>"));
  EXPECT_TRUE(Accepts(*g,
                      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\"}}"
                      "\n</tool_call>"));
  EXPECT_FALSE(AcceptsPrefix(*g, "<tool_call>\n{\"name\": \"now\""));
  EXPECT_FALSE(Accepts(*g,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"days\": 2}}\n</tool_call>"));  // city is required
  // An argument string cannot end the call early.
  EXPECT_FALSE(AcceptsPrefix(*g,
                             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                             "{\"city\": \"a</tool_call>"));
  EXPECT_FALSE(AcceptsPrefix(*g, "Sure! <tool_call>"));
}

TEST(OutputConstraint, RequiredToolCallIsAnyToolWithItsOwnArguments) {
  OutputGrammar g = ChatGrammar(WithTools(R"(,"tool_choice":"required")").c_str());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*g,
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"city\": \"x\"}}"
                       "\n</tool_call>"));
  EXPECT_TRUE(Accepts(*g,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"x\"}}\n</tool_call>"));
  // One call: the grammar is complete after it.
  EXPECT_FALSE(AcceptsPrefix(*g,
                             "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
                             "</tool_call>\n<tool_call>"));
}

TEST(OutputConstraint, ReasoningIsFreeUntilItCloses) {
  OutputGrammar g = ChatGrammar(WithTools(R"(,"tool_choice":"required")").c_str(),
                                /*in_reasoning=*/true);
  ASSERT_NE(g, nullptr);
  const std::string call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*g, "\nI should call now(). {not json} <tool_call> ok\n</think>\n\n" + call));
  EXPECT_FALSE(Accepts(*g, call));  // the reasoning must close first
  EXPECT_FALSE(AcceptsPrefix(*g, "x</think>\n\nplain text"));
}

// The call the fixture Qwen3 template writes for an assistant message is one the grammar
// accepts, and OutputParser reads it back as the same call.
TEST(OutputConstraint, MatchesTheQwen3TemplatesToolCallsAndTheParser) {
  SHARDLM_REQUIRE_FIXTURES();
  const std::string source =
      testing::ReadTextFile(testing::FixturePath("templates/Qwen-Qwen3-0.6B.jinja"));
  MockTokenizer tokenizer;
  Result<ChatFormatter> formatter = ChatFormatter::Create(source, tokenizer);
  ASSERT_TRUE(formatter.ok()) << formatter.status().message();
  ChatCompletionRequest history = Chat(WithTools(R"(,"messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
       "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 3}"}}]}])")
                                           .c_str());
  Result<std::string> rendered = formatter->Render(history);
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const size_t begin = rendered->rfind("<tool_call>");
  const size_t end = rendered->find("<|im_end|>", begin);
  ASSERT_NE(begin, std::string::npos);
  const std::string written = rendered->substr(begin, end - begin);

  OutputGrammar g = ChatGrammar(WithTools(R"(,"tool_choice":"required")").c_str());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, written)) << written;
  OutputParser parser(false, true, "call_");
  OutputDelta delta = parser.Push(written);
  OutputDelta rest = parser.Finish();
  delta.tool_calls.insert(delta.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
  ASSERT_EQ(delta.tool_calls.size(), 1u);
  EXPECT_EQ(delta.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(delta.tool_calls[0].arguments),
            Json::parse(R"({"city":"Paris","days":3})"));
}

TEST(OutputConstraint, RefusalsNameTheParameterAndThePath) {
  std::string param;
  Result<OutputGrammar> bad_schema =
      ChatOutputConstraint(Chat(R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{
      "type":"object","properties":{"zip":{"type":"string","pattern":"^[0-9]+$"}}}}}})"),
                           Context(), &param);
  ASSERT_FALSE(bad_schema.ok());
  EXPECT_EQ(param, "response_format");
  EXPECT_EQ(bad_schema.status().message(),
            "response_format.json_schema.schema: 'pattern' at #/properties/zip is not supported");

  param.clear();
  Result<OutputGrammar> bad_tool = ChatOutputConstraint(
      Chat(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required","tools":[
      {"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b",
      "parameters":{"type":"object","properties":{"n":{"type":"number","minimum":1}}}}}]})"),
      Context(), &param);
  ASSERT_FALSE(bad_tool.ok());
  EXPECT_EQ(param, "tools");
  EXPECT_NE(
      bad_tool.status().message().find(
          "tools[1].function.parameters: 'minimum' of a number at #/properties/n is not supported"),
      std::string::npos)
      << bad_tool.status().message();
}

// The Responses API and Anthropic's name the schemas where their clients put them.
TEST(OutputConstraint, RefusalsUseEachApisFieldNames) {
  std::string param;
  Result<ResponsesRequest> responses = ResponsesRequestFromJSON(
      Json::parse(R"({"input":"hi","text":{"format":{"type":"json_schema","name":"x",
      "schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}}}}}})"),
      nullptr, &param);
  ASSERT_TRUE(responses.ok()) << responses.status().message();
  ConstraintContext context = Context();
  context.endpoint = Endpoint::kResponses;
  Result<OutputGrammar> g = ChatOutputConstraint(responses->chat, context, &param);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(param, "text.format");
  EXPECT_EQ(g.status().message(),
            "text.format.schema: an integer range without 0 at #/properties/n is not supported");

  responses =
      ResponsesRequestFromJSON(Json::parse(R"({"input":"hi","tool_choice":"required","tools":[
      {"type":"function","name":"f","parameters":{"type":"object"}},
      {"type":"function","name":"g","parameters":{"type":"object","not":{}}}]})"),
                               nullptr, &param);
  ASSERT_TRUE(responses.ok()) << responses.status().message();
  g = ChatOutputConstraint(responses->chat, context, &param);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(param, "tools");
  EXPECT_EQ(g.status().message(), "tools[1].parameters: 'not' at # is not supported");

  Result<ChatCompletionRequest> messages = MessagesRequestFromJSON(
      Json::parse(R"({"max_tokens":9,"messages":[{"role":"user","content":"hi"}],
      "tool_choice":{"type":"tool","name":"f"},
      "tools":[{"name":"f","input_schema":{"type":"object","properties":{
      "tags":{"type":"array","uniqueItems":true}}}}]})"),
      &param);
  ASSERT_TRUE(messages.ok()) << messages.status().message();
  context.endpoint = Endpoint::kMessages;
  g = ChatOutputConstraint(messages.value(), context, &param);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(param, "tools");
  EXPECT_EQ(g.status().message(),
            "tools[0].input_schema: 'uniqueItems' (only false) at #/properties/tags is not "
            "supported");
}

// A template that writes calls in another syntax cannot have one forced: a 400 on
// tool_choice, not text the client did not ask for. response_format does not depend on it.
TEST(OutputConstraint, ForcedCallsNeedATemplateThatWritesThem) {
  for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"now"}})"}) {
    std::string param;
    Result<OutputGrammar> g =
        ChatOutputConstraint(Chat(WithTools(std::string(R"(,"tool_choice":)") + choice).c_str()),
                             ConstraintContext{}, &param);
    ASSERT_FALSE(g.ok()) << choice;
    EXPECT_EQ(param, "tool_choice");
    EXPECT_NE(g.status().message().find("<tool_call>"), std::string::npos) << g.status().message();
  }
  std::string param;
  Result<OutputGrammar> g =
      ChatOutputConstraint(Chat(R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_object"}})"),
                           ConstraintContext{}, &param);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_NE(g.value(), nullptr);
}

// Of the fixture templates, Qwen3's writes calls as JSON and Qwen3.5's as <function=…>
// blocks, both of which OutputParser reads; the others use their own syntax (Llama's bare
// JSON, Mistral's [TOOL_CALLS], DeepSeek's tags) or none (ChatML, Gemma 3, which fails on
// tool turns).
TEST(OutputConstraint, WhichTemplatesWriteToolCallsAGrammarCanForce) {
  SHARDLM_REQUIRE_FIXTURES();
  MockTokenizer tokenizer;
  constexpr ToolCallSyntax kNone = ToolCallSyntax::kNone;
  for (const auto& [file, syntax] : std::vector<std::pair<std::string, ToolCallSyntax>>{
           {"Qwen-Qwen3-0.6B.jinja", ToolCallSyntax::kJson},
           {"Qwen3.5-4B.jinja", ToolCallSyntax::kXml},
           {"meta-llama-Llama-3.1-8B-Instruct.jinja", kNone},
           {"meta-llama-Llama-3.2-3B-Instruct.jinja", kNone},
           {"google-gemma-3-it.jinja", kNone},
           {"mistralai-Mistral-Nemo-Instruct-2407.jinja", kNone},
           {"Mistral-Small-3.2-24B-Instruct-2506.jinja", kNone},
           {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", kNone},
           {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", kNone},
           {"teknium-OpenHermes-2.5-Mistral-7B-chatml.jinja", kNone}}) {
    const std::string source = testing::ReadTextFile(testing::FixturePath("templates/" + file));
    Result<ChatFormatter> formatter = ChatFormatter::Create(source, tokenizer);
    ASSERT_TRUE(formatter.ok()) << file << ": " << formatter.status().message();
    EXPECT_EQ(formatter->tool_call_syntax(), syntax) << file;
    EXPECT_EQ(formatter->writes_tool_calls(), syntax != kNone) << file;
  }
  Result<ChatFormatter> chatml = ChatFormatter::Create("", tokenizer);
  ASSERT_TRUE(chatml.ok());
  EXPECT_FALSE(chatml->writes_tool_calls());
}

}  // namespace output_constraint_test
}  // namespace shardlm::server
