// JSON read under limits: depth and value counts stop the parse and name the field; the
// values built are nlohmann's own; tool-call arguments in a request count and are bounded.
#include "server/json_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "server/chat_format.h"
#include "server/mock_engine.h"

namespace shardlm::server {
namespace json_limits_test {

std::string Nested(size_t depth, const std::string& open = "[", const std::string& close = "]") {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += open;
  s += "1";
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(JsonLimits, BuildsWhatNlohmannBuilds) {
  const std::string text =
      R"({"b":[1,-2,3.5,"x\u00e9",true,null,{}],"a":{"k":[[]]},"b":18446744073709551615})";
  Result<Json> ours = ParseJsonWithLimits(text, "", JsonLimits{});
  ASSERT_TRUE(ours.ok()) << ours.status().message();
  EXPECT_EQ(ours->dump(), Json::parse(text).dump());
  EXPECT_EQ(ours->begin().key(), "b");  // insertion order kept, last duplicate wins
}

TEST(JsonLimits, DepthStopsTheParseAndNamesTheField) {
  JsonLimits limits;
  limits.max_depth = 8;
  EXPECT_TRUE(ParseJsonWithLimits(Nested(8), "", limits).ok());
  Result<Json> deep = ParseJsonWithLimits(
      R"({"messages":[{"content":)" + Nested(200000, "{\"a\":", "}") + "}]}", "", limits);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("messages[0].content.a.a.a.a.a"), std::string::npos)
      << deep.status().message();
  EXPECT_NE(deep.status().message().find("deeper than 8 levels"), std::string::npos);
  Result<Json> at_root = ParseJsonWithLimits(Nested(9), "", limits);
  ASSERT_FALSE(at_root.ok());
  EXPECT_NE(at_root.status().message().find("the request body[0][0]"), std::string::npos)
      << at_root.status().message();
}

TEST(JsonLimits, ValueCountIsSharedAcrossTexts) {
  JsonLimits limits;
  limits.max_values = 10;
  JsonBudget budget;
  EXPECT_TRUE(ParseJsonWithLimits("[1,2,3,4]", "a", limits, &budget).ok());  // 5 values
  EXPECT_EQ(budget.values, 5u);
  EXPECT_TRUE(ParseJsonWithLimits("[1,2,3,4]", "b", limits, &budget).ok());
  Result<Json> third = ParseJsonWithLimits("[1]", "c", limits, &budget);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("more than 10 JSON values"), std::string::npos);
}

TEST(JsonLimits, SyntaxErrorsAreInvalidDataWithAPosition) {
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "\"\xff\"", "", "1 2", "[1e99999999]"}) {
    Result<Json> r = ParseJsonWithLimits(bad, "", JsonLimits{});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidData) << bad;
    EXPECT_NE(r.status().message().find("not valid JSON"), std::string::npos)
        << r.status().message();
  }
}

// The request that killed the server: an assistant message whose tool-call arguments hold
// 200000 nested arrays. It is refused with a 400 naming the arguments, and nothing deep is
// ever built or walked.
TEST(JsonLimits, NestedToolArgumentsInARequestAreRefused) {
  const Json body = {{"messages",
                      {{{"role", "user"}, {"content", "hi"}},
                       {{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls",
                         {{{"id", "1"},
                           {"type", "function"},
                           {"function", {{"name", "f"}, {"arguments", Nested(200000)}}}}}}}}}};
  Result<Json> parsed = ParseBody(body.dump());
  ASSERT_TRUE(parsed.ok());  // the body itself is flat: the nesting is inside a string
  std::string param;
  auto chat = ChatCompletionRequestFromJSON(*parsed, &param);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(param, "messages[1].tool_calls[0].function.arguments");
  EXPECT_NE(chat.status().message().find("deeper than 64 levels"), std::string::npos)
      << chat.status().message();

  // Arguments that are not JSON stay a string, and shallow ones become an object.
  Json ok = body;
  ok["messages"][1]["tool_calls"][0]["function"]["arguments"] = "not json {";
  auto plain = ChatCompletionRequestFromJSON(ok);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->messages[1]["tool_calls"][0]["function"]["arguments"].is_string());
  ok["messages"][1]["tool_calls"][0]["function"]["arguments"] = R"({"city":"Paris"})";
  auto object = ChatCompletionRequestFromJSON(ok);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
}

TEST(JsonLimits, ManyArgumentValuesCountAgainstTheRequest) {
  std::string many = "[";
  for (size_t i = 0; i < kMaxJsonValues / 2; ++i) many += "0,";
  many += "0]";
  Json call = {
      {"id", "1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", many}}}};
  Json body = {
      {"messages", {{{"role", "assistant"}, {"content", ""}, {"tool_calls", {call, call, call}}}}}};
  std::string param;
  auto chat = ChatCompletionRequestFromJSON(body, &param);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(param, "messages[0].tool_calls[1].function.arguments");
  EXPECT_NE(chat.status().message().find("JSON values"), std::string::npos);
}

// A tool call in the model's output that nests too deep is left as text, not parsed.
TEST(JsonLimits, DeepToolCallsInModelOutputStayContent) {
  OutputParser parser(/*in_reasoning=*/false, /*parse_tools=*/true, "call_");
  OutputDelta d =
      parser.Push("<tool_call>{\"name\":\"f\",\"arguments\":" + Nested(100000) + "}</tool_call>");
  OutputDelta end = parser.Finish();
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_TRUE(end.tool_calls.empty());
  EXPECT_NE((d.content + end.content).find("<tool_call>"), std::string::npos);
  OutputParser fine(false, true, "call_");
  d = fine.Push("<tool_call>{\"name\":\"f\",\"arguments\":" + Nested(10) + "}</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, Nested(10));
}

// What the template sees is bounded too: a request under the JSON limits but with more
// values than a template may take is a 400 on "messages", not gigabytes of Jinja values.
TEST(JsonLimits, TemplateInputIsBounded) {
  MockTokenizer tokenizer;
  auto formatter = ChatFormatter::Create("", tokenizer);
  ASSERT_TRUE(formatter.ok());
  Json tools = Json::array();
  Json props = Json::object();
  // 2 × 70000 properties of 2 values each: just past the 2^18 values a render takes.
  for (int i = 0; i < 70000; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  for (int i = 0; i < 2; ++i) {
    tools.push_back({{"type", "function"},
                     {"function", {{"name", "f" + std::to_string(i)}, {"parameters", props}}}});
  }
  Json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", tools}};
  auto chat = ChatCompletionRequestFromJSON(body);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  Result<std::string> prompt = formatter->Render(*chat);
  ASSERT_FALSE(prompt.ok());
  EXPECT_NE(prompt.status().message().find("at most"), std::string::npos)
      << prompt.status().message();
}

}  // namespace json_limits_test
}  // namespace shardlm::server
