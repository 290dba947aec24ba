// Output constraints through HTTP, over the MockEngine, which checks its scripted reply
// against the request's grammar token by token: the reply ends where the grammar completes
// (what follows never reaches the client) and a reply that breaks it fails. Each API's way
// of asking: chat's response_format and tool_choice, the Responses API's text.format and
// tool_choice, Anthropic's tool_choice any/tool; reasoning left open by the prompt; and the
// refusals: a forced call under a template whose calls cannot be enforced, a schema outside
// the subset, each in its API's error shape.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "server/mock_engine.h"
#include "server/server_harness.h"
#include "server/tool_template.h"

namespace shardlm::server {
namespace constrained_http_test {

constexpr char kCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
constexpr char kAfterCall[] = " and text the grammar never lets through";

constexpr char kChatTools[] = R"("tools":[
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"}},"required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])";
constexpr char kResponsesTools[] = R"("tools":[
  {"type":"function","name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"}},"required":["city"]}},
  {"type":"function","name":"now","parameters":{"type":"object","properties":{}}}])";
constexpr char kAnthropicTools[] = R"("tools":[
  {"name":"get_weather","input_schema":{"type":"object",
    "properties":{"city":{"type":"string"}},"required":["city"]}},
  {"name":"now","input_schema":{"type":"object","properties":{}}}])";

std::string Stream(bool stream) { return stream ? R"(,"stream":true)" : R"(,"stream":false)"; }

class ConstrainedTest : public ServerTest {
 protected:
  void Start(const std::string& chat_template = kHermesToolTemplate) {
    ServerOptions options;
    options.chat_template = chat_template;
    StartServer(options);
  }
  // The 200 body of a request (a JSON response or an SSE stream).
  std::string Ok(const std::string& path, const std::string& body) {
    auto r = Post(path, body);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 200) << r->body;
    return r->body;
  }
  // The request failed with a 500 saying the reply broke the output constraint.
  void ExpectBrokenConstraint(const std::string& path, const std::string& body) {
    const json e = ExpectError(Post(path, body), 500);
    EXPECT_NE(e["message"].get<std::string>().find("breaks the output constraint"),
              std::string::npos)
        << e.dump();
  }
};

TEST_F(ConstrainedTest, JsonSchemaEndsWhereTheValueEnds) {
  Start();
  engine_->SetReply(R"({"n": 7} and then some text)");
  json j = json::parse(Ok("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{
      "type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}}})"));
  EXPECT_EQ(j["choices"][0]["message"]["content"], R"({"n": 7})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  j = json::parse(Ok("/v1/completions", R"({"prompt":"x","max_tokens":100,
      "response_format":{"type":"json_object"}})"));
  EXPECT_EQ(j["choices"][0]["text"], R"({"n": 7})");

  json r = json::parse(Ok("/v1/responses", R"({"input":"hi","text":{"format":{
      "type":"json_schema","name":"x","strict":true,"schema":{"type":"object",
      "properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}}}})"));
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"][0]["content"][0]["text"], R"({"n": 7})");
  EXPECT_EQ(r["status"], "completed");
}

TEST_F(ConstrainedTest, AReplyThatBreaksTheConstraintFails) {
  Start();
  engine_->SetReply(R"({"n": "seven"})");
  Ok("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_object"}})");  // any object will do
  ExpectBrokenConstraint("/v1/completions", R"({"prompt":"x","response_format":{
      "type":"json_schema","json_schema":{"name":"x","schema":{"type":"object",
      "properties":{"n":{"type":"integer"}}}}}})");
}

TEST_F(ConstrainedTest, ChatForcedToolCall) {
  Start();
  engine_->SetReply(std::string(kCall) + kAfterCall);
  for (const char* choice :
       {R"("required")", R"({"type":"function","function":{"name":"get_weather"}})"}) {
    for (bool stream : {false, true}) {
      const std::string body =
          Ok("/v1/chat/completions",
             std::string(R"({"messages":[{"role":"user","content":"hi"}],)") + kChatTools +
                 R"(,"tool_choice":)" + choice + Stream(stream) + "}");
      EXPECT_NE(body.find(R"("name":"get_weather")"), std::string::npos) << body;
      EXPECT_NE(body.find(R"("finish_reason":"tool_calls")"), std::string::npos) << body;
      EXPECT_EQ(body.find("never lets"), std::string::npos) << body;
      if (!stream) {
        json call = json::parse(body)["choices"][0]["message"]["tool_calls"][0];
        EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
                  json({{"city", "Oslo"}}));
      }
    }
  }
  // Naming the other tool: get_weather's call breaks the grammar.
  ExpectBrokenConstraint("/v1/chat/completions",
                         std::string(R"({"messages":[{"role":"user","content":"hi"}],)") +
                             kChatTools +
                             R"(,"tool_choice":{"type":"function","function":{"name":"now"}}})");
}

TEST_F(ConstrainedTest, ResponsesForcedFunctionCall) {
  Start();
  engine_->SetReply(std::string(kCall) + kAfterCall);
  for (const char* choice : {R"("required")", R"({"type":"function","name":"get_weather"})"}) {
    json r = json::parse(Ok("/v1/responses", std::string(R"({"input":"hi",)") + kResponsesTools +
                                                 R"(,"tool_choice":)" + choice + "}"));
    ASSERT_EQ(r["output"].size(), 1u) << r.dump();
    EXPECT_EQ(r["output"][0]["type"], "function_call");
    EXPECT_EQ(r["output"][0]["name"], "get_weather");
    EXPECT_EQ(json::parse(r["output"][0]["arguments"].get<std::string>()),
              json({{"city", "Oslo"}}));
    const std::string body =
        Ok("/v1/responses", std::string(R"({"input":"hi","stream":true,)") + kResponsesTools +
                                R"(,"tool_choice":)" + choice + "}");
    EXPECT_NE(body.find("response.function_call_arguments.done"), std::string::npos) << body;
    EXPECT_EQ(body.find("never lets"), std::string::npos) << body;
  }
}

TEST_F(ConstrainedTest, AnthropicForcedToolUse) {
  Start();
  engine_->SetReply(std::string(kCall) + kAfterCall);
  for (const char* choice : {R"({"type":"any"})", R"({"type":"tool","name":"get_weather"})"}) {
    json m = json::parse(
        Ok("/v1/messages", std::string(R"({"max_tokens":200,"messages":[{"role":"user",)"
                                       R"("content":"hi"}],)") +
                               kAnthropicTools + R"(,"tool_choice":)" + choice + "}"));
    ASSERT_EQ(m["content"].size(), 1u) << m.dump();
    EXPECT_EQ(m["content"][0]["type"], "tool_use");
    EXPECT_EQ(m["content"][0]["name"], "get_weather");
    EXPECT_EQ(m["content"][0]["input"], json({{"city", "Oslo"}}));
    EXPECT_EQ(m["stop_reason"], "tool_use");
    const std::string body =
        Ok("/v1/messages", std::string(R"({"max_tokens":200,"stream":true,"messages":[)"
                                       R"({"role":"user","content":"hi"}],)") +
                               kAnthropicTools + R"(,"tool_choice":)" + choice + "}");
    EXPECT_NE(body.find(R"("stop_reason":"tool_use")"), std::string::npos) << body;
    EXPECT_EQ(body.find("never lets"), std::string::npos) << body;
  }
}

// A prompt that leaves the model inside <think>: the reasoning is free, the call follows it.
TEST_F(ConstrainedTest, ConstraintStartsWhereThePromptsReasoningCloses) {
  Start(std::string(kHermesToolTemplate) + "{%- if add_generation_prompt %}<think>\n{% endif -%}");
  engine_->SetReply(std::string("a {free} <tool_call> thought</think>\n\n") + kCall + kAfterCall);
  json j = json::parse(
      Ok("/v1/chat/completions", std::string(R"({"messages":[{"role":"user","content":"hi"}],)") +
                                     kChatTools + R"(,"tool_choice":"required"})"));
  json message = j["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "a {free} <tool_call> thought");
  ASSERT_EQ(message["tool_calls"].size(), 1u) << j.dump();
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
}

// Under a template whose calls are not in the syntax the server can force, every API refuses
// a forced call by name, in its own error shape; auto still works.
TEST_F(ConstrainedTest, ForcedCallsAreRefusedWhenTheTemplateCannotWriteThem) {
  Start(kToolTemplate);
  engine_->SetReply("fine");
  json e = ExpectError(
      Post("/v1/chat/completions", std::string(R"({"messages":[{"role":"user","content":"hi"}],)") +
                                       kChatTools + R"(,"tool_choice":"required"})"),
      400);
  EXPECT_EQ(e["param"], "tool_choice");
  EXPECT_NE(e["message"].get<std::string>().find("cannot be enforced"), std::string::npos);
  e = ExpectError(Post("/v1/responses", std::string(R"({"input":"hi",)") + kResponsesTools +
                                            R"(,"tool_choice":"required"})"),
                  400);
  EXPECT_EQ(e["param"], "tool_choice");
  auto r = Post("/v1/messages",
                std::string(R"({"max_tokens":9,"messages":[{"role":"user","content":"hi"}],)") +
                    kAnthropicTools + R"(,"tool_choice":{"type":"any"}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  json a = json::parse(r->body);
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "invalid_request_error");
  EXPECT_NE(a["error"]["message"].get<std::string>().find("tool_choice"), std::string::npos);
  // Counting tokens generates nothing: nothing to enforce.
  r = Post("/v1/messages/count_tokens",
           std::string(R"({"messages":[{"role":"user","content":"hi"}],)") + kAnthropicTools +
               R"(,"tool_choice":{"type":"any"}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  Ok("/v1/chat/completions", std::string(R"({"messages":[{"role":"user","content":"hi"}],)") +
                                 kChatTools + R"(,"tool_choice":"auto"})");
}

TEST_F(ConstrainedTest, SchemasOutsideTheSubsetAreRefusedByName) {
  Start();
  json e = ExpectError(Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{
      "type":"string","format":"email","pattern":"@"}}}})"),
                       400);
  EXPECT_EQ(e["param"], "response_format");
  EXPECT_EQ(e["message"], "response_format.json_schema.schema: 'pattern' at # is not supported");
  e = ExpectError(Post("/v1/responses", R"({"input":"hi","text":{"format":{"type":"json_schema",
      "name":"x","schema":{"type":"number","multipleOf":2}}}})"),
                  400);
  EXPECT_EQ(e["param"], "text.format");
  EXPECT_EQ(e["message"], "text.format.schema: 'multipleOf' at # is not supported");
  auto r = Post("/v1/messages", R"({"max_tokens":9,"messages":[{"role":"user","content":"hi"}],
      "tool_choice":{"type":"tool","name":"f"},"tools":[{"name":"f","input_schema":{
      "type":"object","properties":{"a":{"type":"mystery"}}}}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(
      json::parse(r->body)["error"]["message"].get<std::string>().find("tools[0].input_schema: "),
      std::string::npos)
      << r->body;
}

}  // namespace constrained_http_test
}  // namespace shardlm::server
