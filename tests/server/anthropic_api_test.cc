// Parsing of POST /v1/messages and /v1/messages/count_tokens into the chat request the
// template renders: every block kind, system prompts, tools and tool_choice, stop sequences,
// thinking, and errors that name the field.
#include "server/anthropic_api.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/chat_format.h"
#include "server/json_mutation.h"
#include "server/mock_engine.h"
#include "support/fixtures.h"
#include "support/sanitizer.h"

namespace shardlm::server {
namespace anthropic_api_test {

Result<ChatCompletionRequest> Parse(const std::string& body, std::string* param = nullptr) {
  return MessagesRequestFromJSON(Json::parse(body), param);
}

// The parameter a refused request names.
std::string Refused(const std::string& body) {
  std::string param;
  Result<ChatCompletionRequest> r = Parse(body, &param);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  return param;
}

TEST(AnthropicApi, FieldsMapToTheChatRequest) {
  auto r = Parse(R"({"model":"claude-x","max_tokens":64,"system":"be brief",
    "messages":[{"role":"user","content":"hi"}],"stop_sequences":["END",""],"temperature":0.2,
    "top_p":0.9,"top_k":5,"stream":true,"metadata":{"user_id":"u"},
    "thinking":{"type":"enabled","budget_tokens":2048},"unknown":{"a":1}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->messages, Json::parse(R"([{"role":"system","content":"be brief"},
    {"role":"user","content":"hi"}])"));
  const GenerationOptions& o = r->options;
  EXPECT_EQ(o.model, "claude-x");
  EXPECT_EQ(o.max_tokens, 64);
  EXPECT_EQ(o.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(o.sampling.temperature, 0.2f);
  EXPECT_EQ(o.sampling.top_p, 0.9f);
  EXPECT_EQ(o.sampling.top_k, 5);
  EXPECT_TRUE(o.stream);
  EXPECT_EQ(r->chat_template_kwargs, Json::parse(R"({"enable_thinking":true})"));
  EXPECT_TRUE(r->tools.is_null());

  r = Parse(R"({"max_tokens":1,"messages":[{"role":"user","content":"hi"}],
    "thinking":{"type":"disabled"}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat_template_kwargs, Json::parse(R"({"enable_thinking":false})"));
  r = Parse(R"({"max_tokens":1,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat_template_kwargs, Json::object());  // no thinking field: the template's own
}

TEST(AnthropicApi, EveryBlockKindBecomesChatMessages) {
  auto r = Parse(R"({"max_tokens":9,
    "system":[{"type":"text","text":"rules "},{"type":"text","text":"apply","cache_control":{"type":"ephemeral"}}],
    "messages":[
      {"role":"user","content":[{"type":"text","text":"weather "},{"type":"text","text":"and time?"}]},
      {"role":"assistant","content":[
        {"type":"thinking","thinking":"two calls","signature":"sig"},
        {"type":"redacted_thinking","data":"opaque"},
        {"type":"text","text":"Checking."},
        {"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Paris"}},
        {"type":"tool_use","id":"toolu_2","name":"time","input":{}}]},
      {"role":"user","content":[
        {"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},
        {"type":"tool_result","tool_use_id":"toolu_2","is_error":true,
         "content":[{"type":"text","text":"no clock"}]},
        {"type":"text","text":"thanks"}]},
      {"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"time","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3"}]}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->messages, Json::parse(R"([
    {"role":"system","content":"rules apply"},
    {"role":"user","content":"weather and time?"},
    {"role":"assistant","content":"Checking.","reasoning_content":"two calls","tool_calls":[
      {"id":"toolu_1","type":"function","function":{"name":"weather","arguments":{"city":"Paris"}}},
      {"id":"toolu_2","type":"function","function":{"name":"time","arguments":{}}}]},
    {"role":"tool","tool_call_id":"toolu_1","content":"sunny"},
    {"role":"tool","tool_call_id":"toolu_2","content":"Error: no clock"},
    {"role":"user","content":"thanks"},
    {"role":"assistant","content":"","tool_calls":[
      {"id":"toolu_3","type":"function","function":{"name":"time","arguments":{}}}]},
    {"role":"tool","tool_call_id":"toolu_3","content":""}])"));
}

TEST(AnthropicApi, ToolsAndToolChoice) {
  const std::string tools = R"("tools":[{"name":"weather","description":"d",
    "input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
    {"type":"custom","name":"time","input_schema":{"type":"object"}}])";
  auto parse = [&](const std::string& choice) {
    return Parse(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],)" + tools +
                 (choice.empty() ? "" : ",\"tool_choice\":" + choice) + "}");
  };
  auto r = parse("");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tools, Json::parse(R"([
    {"type":"function","function":{"name":"weather","description":"d",
     "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
    {"type":"function","function":{"name":"time","parameters":{"type":"object"}}}])"));
  EXPECT_EQ(r->tool_choice.mode, ToolChoice::Mode::kAuto);
  r = parse(R"({"type":"any"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tool_choice.mode, ToolChoice::Mode::kRequired);
  r = parse(R"({"type":"tool","name":"time","disable_parallel_tool_use":true})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tool_choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(r->tool_choice.function, "time");
  r = parse(R"({"type":"none"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->tools.is_null());  // tool_choice none: the template is offered none
}

TEST(AnthropicApi, ErrorsNameTheField) {
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Refused("{" + msgs + "}"), "max_tokens");
  EXPECT_EQ(Refused(R"({"max_tokens":0,)" + msgs + "}"), "max_tokens");
  EXPECT_EQ(Refused(R"({"max_tokens":5})"), "messages");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[]})"), "messages");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[{"role":"system","content":"x"}]})"),
            "messages[0].role");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[{"role":"user"}]})"), "messages[0].content");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text",
    "text":"a"},{"type":"image","source":{"type":"base64","data":"x"}}]}]})"),
            "messages[0].content[1].type");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result",
    "tool_use_id":"t","content":[{"type":"document","source":{}}]}]}]})"),
            "messages[0].content[0].content[0].type");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result",
    "content":"x"}]}]})"),
            "messages[0].content[0].tool_use_id");
  EXPECT_EQ(
      Refused(R"({"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use",
    "id":"t","name":"f","input":"{}"}]}]})"),
      "messages[0].content[0].input");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"messages":[{"role":"assistant","content":[
    {"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"system":[{"type":"image"}],)" + msgs + "}"),
            "system[0].type");
  EXPECT_EQ(
      Refused(R"({"max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],)" +
              msgs + "}"),
      "tools[0].type");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"tools":[{"name":"f"}],)" + msgs + "}"),
            "tools[0].input_schema");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"tools":[{"input_schema":{}}],)" + msgs + "}"),
            "tools[0].name");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"tool_choice":{"type":"any"},)" + msgs + "}"),
            "tool_choice");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],
    "tool_choice":{"type":"tool"},)" +
                    msgs + "}"),
            "tool_choice.name");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],
    "tool_choice":{"type":"tool","name":"g"},)" +
                    msgs + "}"),
            "tool_choice");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"tool_choice":{"type":"sometimes"},)" + msgs + "}"),
            "tool_choice.type");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"stop_sequences":"END",)" + msgs + "}"), "stop_sequences");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"thinking":{"type":"always"},)" + msgs + "}"),
            "thinking.type");
  EXPECT_EQ(
      Refused(R"({"max_tokens":5,"thinking":{"type":"enabled","budget_tokens":-1},)" + msgs + "}"),
      "thinking.budget_tokens");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"temperature":3,)" + msgs + "}"), "temperature");
  EXPECT_EQ(Refused(R"({"max_tokens":5,"mcp_servers":[{"url":"x"}],)" + msgs + "}"), "mcp_servers");
}

TEST(AnthropicApi, CountTokensNeedsNoMaxTokens) {
  std::string param;
  auto r = CountTokensRequestFromJSON(
      Json::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"), &param);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_FALSE(CountTokensRequestFromJSON(Json::parse(R"({"model":"m"})"), &param).ok());
  EXPECT_EQ(param, "messages");
}

// Random mutations of valid requests: the parser returns ok or an error naming a field, never
// throws or crashes, and what it accepts renders (or fails with a Status) through ChatML and
// the Qwen3 template of the fixtures, which knows tools and thinking.
TEST(AnthropicApi, FuzzParserNeverCrashes) {
  const std::string seeds[] = {
      R"({"model":"m","max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"}],"stop_sequences":["x"],"temperature":0.5,"thinking":{"type":"enabled","budget_tokens":1024}})",
      R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"tool_use","id":"u","name":"f","input":{"a":[1]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"u","content":[{"type":"text","text":"r"}],"is_error":false}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}})",
  };
  const int ok = FuzzThroughTemplates(seeds, 8765, shardlm::testing::CasesUnlessSanitized(6000),
                                      [](const Json& body) -> std::optional<ChatCompletionRequest> {
                                        std::string param;
                                        auto r = MessagesRequestFromJSON(body, &param);
                                        (void)CountTokensRequestFromJSON(body, &param);
                                        if (!r.ok()) return std::nullopt;
                                        return std::move(r).value();
                                      });
  EXPECT_GT(ok, 100);
}

}  // namespace anthropic_api_test
}  // namespace shardlm::server
