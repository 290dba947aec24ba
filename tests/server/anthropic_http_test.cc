// POST /v1/messages and /v1/messages/count_tokens over the MockEngine: the prompt a Messages
// request renders is the one its equivalent chat request renders, whole and streamed messages,
// token counts, and every error on these routes in Anthropic's shape, those the server answers
// before it reads the body (401, 403, 404, 405, 413) included.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "server/mock_engine.h"
#include "server/server_harness.h"
#include "server/tool_template.h"

namespace shardlm::server {
namespace anthropic_http_test {

const char* kHello = R"({"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]})";

class MessagesTest : public ServerTest {
 protected:
  void Start(ServerOptions options = {}) {
    options.chat_template = kToolTemplate;
    StartServer(options);
  }
  // Asserts Anthropic's error object with this status and type; returns its message.
  std::string ExpectAnthropicError(const httplib::Result& r, int status, const char* type) {
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, status) << r->body;
    json j = json::parse(r->body, nullptr, false);
    EXPECT_EQ(j["type"], "error") << r->body;
    EXPECT_EQ(j["error"]["type"], type) << r->body;
    EXPECT_EQ(j["error"].size(), 2u) << r->body;  // type and message only
    return j["error"].value("message", "");
  }
};

TEST_F(MessagesTest, RendersThePromptItsChatEquivalentRenders) {
  Start();
  engine_->SetReply("ok");
  ASSERT_TRUE(Post("/v1/chat/completions", R"({"messages":[
    {"role":"system","content":"be brief"},
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":"","reasoning_content":"call it",
     "tool_calls":[{"id":"toolu_1","type":"function",
                    "function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"toolu_1","content":"sunny"}],
    "tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object"}}}],
    "chat_template_kwargs":{"enable_thinking":false}})"));
  const std::string chat_prompt = engine_->LastPromptText();
  auto r = Post("/v1/messages", R"({"model":"m","max_tokens":8,"system":"be brief",
    "thinking":{"type":"disabled"},"messages":[
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":[{"type":"thinking","thinking":"call it","signature":""},
      {"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Paris"}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}],
    "tools":[{"name":"weather","input_schema":{"type":"object"}}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(engine_->LastPromptText(), chat_prompt);
  EXPECT_NE(chat_prompt.find("sunny [for toolu_1]"), std::string::npos) << chat_prompt;
  EXPECT_NE(chat_prompt.find("[no thinking]"), std::string::npos) << chat_prompt;
}

TEST_F(MessagesTest, WholeMessageWithThinkingAndAToolCall) {
  Start();
  engine_->SetReply(
      "<think>hm</think>Let me check.<tool_call>{\"name\":\"weather\",\"arguments\":"
      "{\"city\":\"Oslo\"}}</tool_call>");
  auto r = Post("/v1/messages", R"({"model":"m","max_tokens":200,
    "messages":[{"role":"user","content":"weather?"}],
    "tools":[{"name":"weather","input_schema":{"type":"object"}}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json m = json::parse(r->body);
  EXPECT_TRUE(m["id"].get<std::string>().starts_with("msg_"));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "mock-model");
  ASSERT_EQ(m["content"].size(), 3u) << m.dump();
  EXPECT_EQ(m["content"][0], json::parse(R"({"type":"thinking","thinking":"hm","signature":""})"));
  EXPECT_EQ(m["content"][1], json::parse(R"({"type":"text","text":"Let me check."})"));
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_TRUE(m["content"][2]["id"].get<std::string>().starts_with("toolu_"));
  EXPECT_EQ(m["content"][2]["input"], json({{"city", "Oslo"}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  EXPECT_GT(m["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 0);
  EXPECT_EQ(m["usage"]["output_tokens"], 65);
}

TEST_F(MessagesTest, StopReasonsThroughTheEngine) {
  Start();
  engine_->SetReply("one two three");
  auto stop_of = [&](const std::string& extra) {
    auto r = Post("/v1/messages", R"({"messages":[{"role":"user","content":"x"}],)" + extra + "}");
    EXPECT_TRUE(r && r->status == 200);
    json m = json::parse(r->body);
    return m["stop_reason"].get<std::string>() + "/" + m["stop_sequence"].dump() + "/" +
           m["content"][0]["text"].get<std::string>();
  };
  EXPECT_EQ(stop_of(R"("max_tokens":3)"), "max_tokens/null/one");
  EXPECT_EQ(stop_of(R"("max_tokens":30,"stop_sequences":["nope"," three"])"),
            "stop_sequence/\" three\"/one two");
  EXPECT_EQ(stop_of(R"("max_tokens":30)"), "end_turn/null/one two three");
}

TEST_F(MessagesTest, StreamedMessage) {
  Start();
  engine_->SetReply("<think>hm</think>Hi there");
  auto r = Post("/v1/messages", R"({"model":"m","max_tokens":64,"stream":true,
    "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<std::string> names;
  std::string text, thinking;
  json final_delta;
  size_t pos = 0;
  while ((pos = r->body.find("event: ", pos)) != std::string::npos) {
    const size_t nl = r->body.find('\n', pos);
    const size_t end = r->body.find("\n\n", nl);
    names.push_back(r->body.substr(pos + 7, nl - pos - 7));
    json data = json::parse(r->body.substr(nl + 7, end - nl - 7));
    if (data["type"] == "content_block_delta" && data["delta"]["type"] == "text_delta") {
      text += data["delta"]["text"];
    }
    if (data["type"] == "content_block_delta" && data["delta"]["type"] == "thinking_delta") {
      thinking += data["delta"]["thinking"];
    }
    if (data["type"] == "message_delta") final_delta = data;
    pos = end;
  }
  ASSERT_GE(names.size(), 8u);
  EXPECT_EQ(names[0], "message_start");
  EXPECT_EQ(names[1], "ping");
  EXPECT_EQ(names[names.size() - 2], "message_delta");
  EXPECT_EQ(names.back(), "message_stop");
  EXPECT_EQ(thinking, "hm");
  EXPECT_EQ(text, "Hi there");
  EXPECT_EQ(final_delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(final_delta["usage"]["output_tokens"], 12);
}

TEST_F(MessagesTest, CountTokensIsThePromptAMessageWouldSend) {
  Start();
  const char* body = R"({"model":"m","system":"sys","messages":[{"role":"user","content":"hi"}],
    "tools":[{"name":"f","input_schema":{"type":"object"}}]})";
  auto r = Post("/v1/messages/count_tokens", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json counted = json::parse(r->body);
  EXPECT_EQ(counted.size(), 1u);
  engine_->SetReply("ok");
  json body_with_max = json::parse(body);
  body_with_max["max_tokens"] = 4;
  r = Post("/v1/messages", body_with_max.dump());
  json m = json::parse(r->body);
  EXPECT_EQ(counted["input_tokens"], m["usage"]["input_tokens"]);
  // Counting submitted nothing: the engine saw the message's prompt only.
  EXPECT_EQ(engine_->Stats().requests_total, 1);
  EXPECT_EQ(counted["input_tokens"], engine_->Stats().prompt_tokens_total);
}

TEST_F(MessagesTest, ErrorsBeforeAndAfterTheBodyAreAnthropicErrors) {
  ServerOptions options;
  options.api_key = "sk-test";
  Start(options);
  // Before the body: the key, the route, the method, the size.
  ExpectAnthropicError(Post("/v1/messages", kHello), 401, "authentication_error");
  httplib::Headers key = {{"x-api-key", "sk-test"}, {"anthropic-version", "2023-06-01"}};
  auto post = [&](const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), key, body, "application/json");
  };
  httplib::Headers foreign = key;
  foreign.emplace("Origin", "http://evil.example");
  ExpectAnthropicError(client_->Post("/v1/messages", foreign, kHello, "application/json"), 403,
                       "permission_error");
  ExpectAnthropicError(post("/v1/messages/batches", "{}"), 404, "not_found_error");
  ExpectAnthropicError(client_->Get("/v1/messages", key), 405, "invalid_request_error");
  ExpectAnthropicError(post("/v1/messages", std::string(2 << 20, ' ')), 413, "request_too_large");
  // After: the body's JSON and fields.
  ExpectAnthropicError(post("/v1/messages", "{\"max_tokens\":"), 400, "invalid_request_error");
  std::string message =
      ExpectAnthropicError(post("/v1/messages", R"({"messages":[{"role":"user","content":"x"}]})"),
                           400, "invalid_request_error");
  EXPECT_NE(message.find("max_tokens"), std::string::npos) << message;
  message = ExpectAnthropicError(
      post("/v1/messages", R"({"max_tokens":5,"messages":[{"role":"user","content":[
        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]})"),
      400, "invalid_request_error");
  EXPECT_NE(message.find("messages[0].content[0].type"), std::string::npos) << message;
  ExpectAnthropicError(
      post("/v1/messages", R"({"max_tokens":5,"messages":[{"role":"user","content":")" +
                               std::string(300, 'x') + "\"}]}"),
      400, "invalid_request_error");
  auto ok = post("/v1/messages", kHello);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  // The other routes keep OpenAI's shape.
  json e = ExpectError(client_->Post("/v1/chat/completions", key, "{", "application/json"), 400);
  EXPECT_EQ(e["type"], "invalid_request_error");
}

TEST_F(MessagesTest, EngineErrorsAreOverloadedOrApiErrors) {
  Start();
  engine_->SetStageDown(Unavailable("stage 1 is unavailable"));
  std::string message = ExpectAnthropicError(Post("/v1/messages", kHello), 503, "overloaded_error");
  EXPECT_NE(message.find("stage 1"), std::string::npos);
  engine_->SetStageDown(Status::Ok());
  engine_->SetReply("abcdef");
  engine_->FailAfterTokens(2, Status(StatusCode::kInternal, "kaput"));
  ExpectAnthropicError(Post("/v1/messages", kHello), 500, "api_error");
  auto r = Post("/v1/messages", R"({"max_tokens":64,"stream":true,
    "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->body.ends_with(
      "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"
      "\"kaput\"}}\n\n"))
      << r->body;
}

}  // namespace anthropic_http_test
}  // namespace shardlm::server
