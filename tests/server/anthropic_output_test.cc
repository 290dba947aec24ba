// Anthropic Messages output: the whole message (byte for byte), stop reasons, the stream's
// event sequence (its blocks adding up to the whole message's content), the error shape and
// which routes use it.
#include "server/anthropic_output.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/sse_events.h"

namespace shardlm::server {
namespace anthropic_output_test {

const ResponseMeta kMeta{"msg_00c0ffee00000007", 1700000000, "mock-model"};

GenerationResult Generated() {
  GenerationResult r;
  r.reasoning = "think";
  r.content = "Hello";
  r.tool_calls.push_back(ToolCall{"toolu_x_0", "weather", R"({"city":"Paris"})"});
  r.usage.prompt_tokens = 10;
  r.usage.cached_tokens = 4;
  r.usage.completion_tokens = 9;
  return r;
}

TEST(AnthropicOutput, WholeMessageByteForByte) {
  AnthropicFormatter f(kMeta, 10);
  EXPECT_EQ(
      DumpJson(f.Whole(Generated())),
      R"({"id":"msg_00c0ffee00000007","type":"message","role":"assistant","model":"mock-model","content":[{"type":"thinking","thinking":"think","signature":""},{"type":"text","text":"Hello"},{"type":"tool_use","id":"toolu_x_0","name":"weather","input":{"city":"Paris"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":6,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":9}})");
}

TEST(AnthropicOutput, StopReasons) {
  auto stop = [](GenerationResult r) {
    AnthropicFormatter f(kMeta, 10);
    const Json m = f.Whole(r);
    return m["stop_reason"].get<std::string>() + "/" +
           (m["stop_sequence"].is_null() ? "null" : m["stop_sequence"].get<std::string>());
  };
  GenerationResult r = Generated();
  EXPECT_EQ(stop(r), "tool_use/null");
  r.tool_calls.clear();
  EXPECT_EQ(stop(r), "end_turn/null");
  r.stop_sequence = "END";
  EXPECT_EQ(stop(r), "stop_sequence/END");
  r.finish = FinishReason::kLength;
  EXPECT_EQ(stop(r), "max_tokens/null");
}

TEST(AnthropicOutput, ArgumentsThatAreNotAnObjectAreKeptUnderArguments) {
  GenerationResult r;
  r.tool_calls.push_back(ToolCall{"toolu_1", "f", "[1,2]"});
  r.tool_calls.push_back(ToolCall{"toolu_2", "g", "not json"});
  AnthropicFormatter f(kMeta, 1);
  const Json m = f.Whole(r);
  EXPECT_EQ(m["content"][0]["input"], Json::parse(R"({"arguments":[1,2]})"));
  EXPECT_EQ(m["content"][1]["input"], Json::parse(R"({"arguments":"not json"})"));
}

TEST(AnthropicOutput, StreamEventsAddUpToTheWholeMessage) {
  const GenerationResult result = Generated();
  AnthropicFormatter f(kMeta, 10);
  std::string sse;
  f.StreamStart(&sse);
  OutputDelta piece;
  piece.reasoning = "thi";
  f.StreamDelta(piece, nullptr, &sse);
  piece.reasoning = "nk";
  f.StreamDelta(piece, nullptr, &sse);
  f.StreamDelta(OutputDelta{}, nullptr, &sse);
  piece.reasoning.clear();
  piece.content = "Hello";
  f.StreamDelta(piece, nullptr, &sse);
  OutputDelta last;
  last.tool_calls = result.tool_calls;
  f.StreamEnd(last, result, &sse);
  std::vector<ParsedSseEvent> events = ParseSseEvents(sse);
  std::vector<std::string> names;
  for (const ParsedSseEvent& e : events) names.push_back(e.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "message_start", "ping", "content_block_start", "content_block_delta",
                "content_block_delta", "content_block_stop", "content_block_start",
                "content_block_delta", "content_block_stop", "content_block_start",
                "content_block_delta", "content_block_stop", "message_delta", "message_stop"}));
  ASSERT_EQ(events.size(), 14u);
  EXPECT_EQ(
      DumpJson(events[0].data),
      R"({"type":"message_start","message":{"id":"msg_00c0ffee00000007","type":"message","role":"assistant","model":"mock-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}})");
  EXPECT_EQ(
      DumpJson(events[9].data),
      R"({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_x_0","name":"weather","input":{}}})");
  EXPECT_EQ(
      DumpJson(events[10].data),
      R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}"}})");
  EXPECT_EQ(
      DumpJson(events[12].data),
      R"({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":6,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":9}})");
  // Accumulate the blocks the way a client does: they are the whole message's content.
  Json content = Json::array();
  for (const ParsedSseEvent& e : events) {
    if (e.name == "content_block_start") content.push_back(e.data["content_block"]);
    if (e.name != "content_block_delta") continue;
    Json& block = content[e.data["index"].get<size_t>()];
    const Json& d = e.data["delta"];
    if (d["type"] == "thinking_delta")
      block["thinking"] = block["thinking"].get<std::string>() + d["thinking"].get<std::string>();
    if (d["type"] == "text_delta") {
      block["text"] = block["text"].get<std::string>() + d["text"].get<std::string>();
    }
    if (d["type"] == "input_json_delta")
      block["input"] = Json::parse(d["partial_json"].get<std::string>());
  }
  AnthropicFormatter whole(kMeta, 10);
  EXPECT_EQ(content, whole.Whole(result)["content"]);
}

TEST(AnthropicOutput, ErrorsInAnthropicsShape) {
  ApiError e;
  e.http_status = 503;
  e.type = "unavailable_error";
  e.message = "stage 1 is unavailable";
  EXPECT_EQ(
      DumpJson(AnthropicErrorJSON(e)),
      R"({"type":"error","error":{"type":"overloaded_error","message":"stage 1 is unavailable"}})");
  AnthropicFormatter f(kMeta, 1);
  std::string sse;
  f.StreamError(e, &sse);
  EXPECT_EQ(
      sse,
      "event: error\ndata: "
      R"({"type":"error","error":{"type":"overloaded_error","message":"stage 1 is unavailable"}})"
      "\n\n");
  const std::pair<int, const char*> types[] = {
      {400, "invalid_request_error"}, {401, "authentication_error"},
      {403, "permission_error"},      {404, "not_found_error"},
      {405, "invalid_request_error"}, {408, "timeout_error"},
      {409, "conflict_error"},        {413, "request_too_large"},
      {429, "rate_limit_error"},      {500, "api_error"},
      {503, "overloaded_error"},      {507, "api_error"}};
  for (const auto& [status, type] : types) EXPECT_STREQ(AnthropicErrorType(status), type) << status;
  EXPECT_TRUE(IsAnthropicPath("/v1/messages"));
  EXPECT_TRUE(IsAnthropicPath("/v1/messages/count_tokens"));
  EXPECT_TRUE(IsAnthropicPath("/v1/messages/batches"));
  EXPECT_FALSE(IsAnthropicPath("/v1/messagesx"));
  EXPECT_FALSE(IsAnthropicPath("/v1/chat/completions"));
  EXPECT_FALSE(IsAnthropicPath(""));
}

}  // namespace anthropic_output_test
}  // namespace shardlm::server
