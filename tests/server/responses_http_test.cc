// POST /v1/responses over the MockEngine: the prompt a Responses request renders is the one
// its equivalent chat request renders (so the prefix cache and slots serve both alike), whole
// and streamed responses, a tool loop through stored items and previous_response_id, and
// errors in OpenAI's shape naming the field.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "server/mock_engine.h"
#include "server/server_harness.h"
#include "server/tool_template.h"

namespace shardlm::server {
namespace responses_http_test {

// The events of an SSE body with `event:` lines: their names and data.
std::vector<std::pair<std::string, json>> NamedEvents(const std::string& body) {
  std::vector<std::pair<std::string, json>> events;
  size_t pos = 0;
  while ((pos = body.find("event: ", pos)) != std::string::npos) {
    const size_t nl = body.find('\n', pos);
    const size_t end = body.find("\n\n", nl);
    events.emplace_back(body.substr(pos + 7, nl - pos - 7),
                        json::parse(body.substr(nl + 7, end - nl - 7)));
    pos = end;
  }
  return events;
}

class ResponsesTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.chat_template = kToolTemplate;
    StartServer(options);
  }
  json Respond(const std::string& body, int status = 200) {
    auto r = Post("/v1/responses", body);
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, status) << r->body;
    return json::parse(r->body);
  }
};

TEST_F(ResponsesTest, RendersThePromptItsChatEquivalentRenders) {
  engine_->SetReply("ok");
  ASSERT_TRUE(Post("/v1/chat/completions", R"({"messages":[
    {"role":"system","content":"be brief"},
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":"Checking.","reasoning_content":"call it",
     "tool_calls":[{"id":"call_1","type":"function",
                    "function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"sunny"}],
    "tools":[{"type":"function","function":{"name":"weather","parameters":{}}}]})"));
  const std::string chat_prompt = engine_->LastPromptText();
  Respond(R"({"instructions":"be brief","input":[
    {"role":"user","content":[{"type":"input_text","text":"weather?"}]},
    {"type":"reasoning","id":"rs_1","summary":[],
     "content":[{"type":"reasoning_text","text":"call it"}]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
    {"type":"function_call","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call_output","call_id":"call_1","output":"sunny"}],
    "tools":[{"type":"function","name":"weather","parameters":{}}]})");
  EXPECT_EQ(engine_->LastPromptText(), chat_prompt);
  EXPECT_NE(chat_prompt.find("<think>call it</think>Checking.<tool_call>call_1 weather {"),
            std::string::npos)
      << chat_prompt;
}

TEST_F(ResponsesTest, WholeResponse) {
  engine_->SetReply("<think>hm</think>Hi there");
  json r = Respond(R"({"model":"m","input":"hello","max_output_tokens":100,
                       "metadata":{"trace":"7"}})");
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "mock-model");
  EXPECT_EQ(r["max_output_tokens"], 100);
  EXPECT_EQ(r["metadata"], json({{"trace", "7"}}));
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "hm");
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hi there");
  EXPECT_EQ(r["usage"]["output_tokens"], 12);  // the tags are a token each
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 4);
  EXPECT_EQ(r["usage"]["input_tokens"].get<int>() + 12, r["usage"]["total_tokens"].get<int>());
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 0);

  engine_->SetReply("one two three");
  r = Respond(R"({"input":"x","max_output_tokens":3})");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "one");
}

TEST_F(ResponsesTest, StreamedResponse) {
  engine_->SetReply("Hi there");
  auto r = Post("/v1/responses", R"({"input":"hello","stream":true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  auto events = NamedEvents(r->body);
  ASSERT_GE(events.size(), 8u);
  EXPECT_EQ(events.front().first, "response.created");
  EXPECT_EQ(events[1].first, "response.in_progress");
  EXPECT_EQ(events.back().first, "response.completed");
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].second["sequence_number"], i);
    if (events[i].first == "response.output_text.delta") text += events[i].second["delta"];
  }
  EXPECT_EQ(text, "Hi there");
  const json& done = events.back().second["response"];
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hi there");
  EXPECT_EQ(done["usage"]["output_tokens"], 8);
}

TEST_F(ResponsesTest, AFailureMidStreamEndsWithFailedAndError) {
  engine_->SetReply("abcdef");
  engine_->FailAfterTokens(2, Unavailable("stage 1 is unavailable"));
  auto r = Post("/v1/responses", R"({"input":"hello","stream":true})");
  ASSERT_TRUE(r);
  auto events = NamedEvents(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].first, "response.failed");
  EXPECT_EQ(events.back().first, "error");
  EXPECT_EQ(events.back().second["code"], "stage_unavailable");
  EXPECT_EQ(events.back().second["error"]["message"], "stage 1 is unavailable");
}

TEST_F(ResponsesTest, ToolLoopThroughStoredItemsAndPreviousResponse) {
  engine_->SetReply(
      "<think>need it</think><tool_call>{\"name\":\"weather\",\"arguments\":{\"city\":\"Oslo\"}}"
      "</tool_call>");
  const char* tools = R"("tools":[{"type":"function","name":"weather","parameters":{}}])";
  json first = Respond(std::string(R"({"input":"weather in Oslo?",)") + tools + "}");
  ASSERT_EQ(first["output"].size(), 2u) << first.dump();
  const json& call = first["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "weather");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json({{"city", "Oslo"}}));
  const std::string call_id = call["call_id"];

  // The Vercel AI SDK's second step: references to the stored output, then the result.
  engine_->SetReply("It is sunny.");
  json second = Respond(R"({"input":[{"role":"user","content":"weather in Oslo?"},
    {"type":"item_reference","id":")" +
                        first["output"][0]["id"].get<std::string>() +
                        R"("},{"type":"item_reference","id":")" + call["id"].get<std::string>() +
                        R"("},{"type":"function_call_output","call_id":")" + call_id +
                        R"(","output":"sunny"}],)" + tools + "}");
  const std::string prompt = engine_->LastPromptText();
  EXPECT_NE(prompt.find("<think>need it</think><tool_call>" + call_id + " weather {"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("sunny [for " + call_id + "]"), std::string::npos) << prompt;

  // The next turn names only the previous response: the whole conversation is rendered again.
  engine_->SetReply("Bye.");
  Respond(R"({"previous_response_id":")" + second["id"].get<std::string>() +
          R"(","input":"thanks",)" + tools + "}");
  const std::string third = engine_->LastPromptText();
  EXPECT_TRUE(third.starts_with(prompt.substr(0, prompt.rfind("<|im_start|>assistant|")))) << third;
  EXPECT_NE(third.find("It is sunny.<|im_end|><|im_start|>user|thanks<|im_end|>"),
            std::string::npos)
      << third;
}

TEST_F(ResponsesTest, NothingIsKeptWithStoreFalse) {
  engine_->SetReply("Hi");
  json r = Respond(R"({"input":"hello","store":false})");
  json e =
      ExpectError(Post("/v1/responses", R"({"input":[{"type":"item_reference","id":")" +
                                            r["output"][0]["id"].get<std::string>() + R"("}]})"),
                  400);
  EXPECT_EQ(e["param"], "input[0].id");
  e = ExpectError(Post("/v1/responses", R"({"input":"x","previous_response_id":")" +
                                            r["id"].get<std::string>() + R"("})"),
                  400);
  EXPECT_EQ(e["param"], "previous_response_id");
  EXPECT_NE(e["message"].get<std::string>().find("not across restarts"), std::string::npos);
}

TEST_F(ResponsesTest, ErrorsAreOpenAiErrorsNamingTheField) {
  json e = ExpectError(Post("/v1/responses", R"({"input":[{"role":"user","content":[
    {"type":"input_image","image_url":"https://x/y.png"}]}]})"),
                       400);
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "input[0].content[0].type");
  EXPECT_NE(e["message"].get<std::string>().find("text-only"), std::string::npos);
  e = ExpectError(Post("/v1/responses", R"({"input":"x","tools":[{"type":"web_search"}]})"), 400);
  EXPECT_EQ(e["param"], "tools[0].type");
  e = ExpectError(Post("/v1/responses", "{\"input\":\"" + std::string(300, 'x') + "\"}"), 400);
  EXPECT_EQ(e["param"], "input");
  EXPECT_EQ(e["code"], "context_length_exceeded");
  e = ExpectError(Post("/v1/responses", "{\"input\":"), 400);
  EXPECT_EQ(client_->Get("/v1/responses")->status, 405);
}

}  // namespace responses_http_test
}  // namespace shardlm::server
