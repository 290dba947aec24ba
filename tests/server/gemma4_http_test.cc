// A Gemma 4 model behind the HTTP APIs, through the mock engine: its thought channel and
// tool calls are markup its vocabulary makes CONTROL tokens (the mock's tokenizer has them
// so), which a chat request has the engine render, so they come back as reasoning_content
// and tool_calls (chat, streamed and not), as function_call items (Responses) and tool_use
// blocks (Messages). Turn markers stay hidden, and a raw completion shows no markup. A
// call and its result go back into the next prompt the way Gemma's template writes them.
#include <gtest/gtest.h>

#include "server/server_harness.h"
#include "server/sse_events.h"
#include "server/tool_template.h"

namespace shardlm::server {
namespace gemma4_http_test {

// What a Gemma 4 model writes when it thinks, then calls a tool: every marker is one token.
constexpr char kThinkThenCall[] =
    "<|channel>thought\nThe user wants the weather.<channel|>"
    "<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:2}<tool_call|>";
constexpr char kTools[] =
    R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{
      "type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}])";

class Gemma4HttpTest : public ServerTest {
 protected:
  void Start() {
    ServerOptions options;
    options.chat_template = kGemmaToolTemplate;
    StartServer(options);
  }
  json Chat(const std::string& extra) {
    auto r = Post("/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"weather in Paris?"}],)" + extra + "}");
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
};

TEST_F(Gemma4HttpTest, ReasoningAndAToolCall) {
  Start();
  engine_->SetReply(kThinkThenCall);
  json j = Chat(kTools);
  json msg = j["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "The user wants the weather.");
  EXPECT_TRUE(msg["content"].is_null()) << msg.dump();
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << msg.dump();
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city":"Paris, \"FR\"","days":2})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  // Every marker was one token.
  const std::string reply = kThinkThenCall;
  size_t marker_bytes = 0;
  for (const char* marker :
       {"<|channel>", "<channel|>", "<|tool_call>", "<|\"|>", "<|\"|>", "<tool_call|>"}) {
    marker_bytes += std::string(marker).size();
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], reply.size() - marker_bytes + 6);
}

TEST_F(Gemma4HttpTest, StreamedReasoningAndToolCall) {
  Start();
  engine_->SetReply(std::string("Sure.") + kThinkThenCall);
  auto r = Post(
      "/v1/chat/completions",
      std::string(R"({"messages":[{"role":"user","content":"x"}],"stream":true,)") + kTools + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> data = SseData(r->body);
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(data.back(), "[DONE]");
  std::string content, reasoning, finish;
  json calls = json::array();
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i]);
    if (c["choices"].empty()) continue;
    json d = c["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"];
    if (d.contains("tool_calls")) {
      for (const json& call : d["tool_calls"]) calls.push_back(call);
    }
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Sure.");
  EXPECT_EQ(reasoning, "The user wants the weather.");
  ASSERT_EQ(calls.size(), 1u) << r->body;
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city":"Paris, \"FR\"","days":2})"));
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(r->body.find("<|"), std::string::npos) << r->body;
}

// Markup outside the output syntax (a turn marker) stays hidden, as do all markers in a raw
// completion, which no output parser reads.
TEST_F(Gemma4HttpTest, OtherControlTokensStayHidden) {
  Start();
  engine_->SetReply("<|turn>Hi<|channel>thought\nhm<channel|> there");
  json j = Chat(R"("max_tokens":100)");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi there");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "hm");
  auto r = Post("/v1/completions", R"({"prompt":"x","max_tokens":100})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "Hithought\nhm there");
}

TEST_F(Gemma4HttpTest, ResponsesAndMessagesGetTheCallToo) {
  Start();
  engine_->SetReply(kThinkThenCall);
  auto r = Post("/v1/responses", R"({"input":"weather in Paris?","tools":[{"type":"function",
    "name":"get_weather","parameters":{"type":"object"}}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json response = json::parse(r->body);
  ASSERT_EQ(response["output"].size(), 2u) << response.dump();
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  const json& call = response["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>())["days"], 2);

  r = Post("/v1/messages", R"({"model":"m","max_tokens":200,"stream":true,
    "messages":[{"role":"user","content":"weather?"}],
    "tools":[{"name":"get_weather","input_schema":{"type":"object"}}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string thinking, input;
  bool tool_use = false;
  std::string stop_reason;
  for (const ParsedSseEvent& e : ParseSseEvents(r->body)) {
    if (e.name == "content_block_start" && e.data["content_block"]["type"] == "tool_use") {
      tool_use = true;
      EXPECT_EQ(e.data["content_block"]["name"], "get_weather");
    }
    if (e.name == "content_block_delta") {
      const Json& delta = e.data["delta"];
      if (delta["type"] == "thinking_delta") thinking += delta["thinking"].get<std::string>();
      if (delta["type"] == "input_json_delta") input += delta["partial_json"].get<std::string>();
    }
    if (e.name == "message_delta") stop_reason = e.data["delta"]["stop_reason"];
  }
  EXPECT_EQ(thinking, "The user wants the weather.");
  EXPECT_TRUE(tool_use);
  EXPECT_EQ(json::parse(input), json::parse(R"({"city":"Paris, \"FR\"","days":2})"));
  EXPECT_EQ(stop_reason, "tool_use");
}

// A call the model made comes back into the next prompt in Gemma's notation, its result in
// the same turn, which the model goes on with.
TEST_F(Gemma4HttpTest, APreviousCallIsRenderedInGemmasNotation) {
  Start();
  engine_->SetReply("It is sunny.");
  auto r = Post("/v1/chat/completions", std::string(R"({"messages":[
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"days\":2,\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"}],)") +
                                            kTools + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "It is sunny.");
  const std::string prompt = engine_->LastPromptText();
  EXPECT_TRUE(prompt.ends_with(
      "<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|>"
      "<|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}<tool_response|>"
      "<|channel>thought\n<channel|>"))
      << prompt;
}

}  // namespace gemma4_http_test
}  // namespace shardlm::server
