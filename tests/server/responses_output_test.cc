// The Responses API's output: the whole response object (byte for byte), the stream's event
// sequence (names, sequence numbers, item and part events, the final response equal to the
// whole one), incomplete and failed responses, and what is kept in the store.
#include "server/responses_output.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/sse_events.h"

namespace shardlm::server {
namespace responses_output_test {

const ResponseMeta kMeta{"resp_00c0ffee00000007", 1700000000, "mock-model"};

ResponsesOutputOptions Options(ResponseStore* store = nullptr) {
  ResponsesOutputOptions o;
  o.echo = Json::parse(R"({"instructions":null,"max_output_tokens":null,
    "parallel_tool_calls":true,"previous_response_id":null,
    "reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,
    "text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,
    "truncation":"disabled","user":null,"metadata":{}})");
  o.store = store;
  o.input_items = Json::parse(R"([{"type":"message","role":"user","content":"hi"}])");
  return o;
}

GenerationResult Generated(FinishReason finish = FinishReason::kStop) {
  GenerationResult r;
  r.reasoning = "think";
  r.content = "Hello";
  r.tool_calls.push_back(ToolCall{"call_x_0", "weather", R"({"city":"Paris"})"});
  r.finish = finish;
  r.reasoning_tokens = 3;
  r.usage.prompt_tokens = 10;
  r.usage.cached_tokens = 4;
  r.usage.completion_tokens = 9;
  return r;
}

// The stream of `result` as the session delivers it: a delta per piece, then the end.
std::string Stream(ResponsesFormatter& f, const GenerationResult& result) {
  std::string sse;
  f.StreamStart(&sse);
  OutputDelta reasoning, text, calls;
  reasoning.reasoning = result.reasoning.substr(0, 2);
  f.StreamDelta(reasoning, nullptr, &sse);
  reasoning.reasoning = result.reasoning.substr(2);
  f.StreamDelta(reasoning, nullptr, &sse);
  f.StreamDelta(OutputDelta{}, nullptr, &sse);  // a token that added nothing (a tag)
  text.content = result.content;
  f.StreamDelta(text, nullptr, &sse);
  calls.tool_calls = result.tool_calls;
  f.StreamEnd(calls, result, &sse);
  return sse;
}

TEST(ResponsesOutput, WholeResponseByteForByte) {
  ResponsesFormatter f(kMeta, Options());
  EXPECT_EQ(
      DumpJson(f.Whole(Generated())),
      R"({"id":"resp_00c0ffee00000007","object":"response","created_at":1700000000,"status":"completed","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"mock-model","output":[{"id":"rs_00c0ffee00000007_0","type":"reasoning","summary":[{"type":"summary_text","text":"think"}],"content":[{"type":"reasoning_text","text":"think"}]},{"id":"msg_00c0ffee00000007_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Hello"}],"role":"assistant"},{"id":"fc_00c0ffee00000007_2","type":"function_call","status":"completed","arguments":"{\"city\":\"Paris\"}","call_id":"call_x_0","name":"weather"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":19},"user":null,"metadata":{}})");
}

TEST(ResponsesOutput, StreamEventsInOrderEndingWithTheWholeResponse) {
  ResponsesFormatter streamed(kMeta, Options());
  std::vector<ParsedSseEvent> events = ParseSseEvents(Stream(streamed, Generated()));
  std::vector<std::string> names;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data["sequence_number"], i);
    names.push_back(events[i].name);
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",  // reasoning
                                         "response.reasoning_summary_part.added",
                                         "response.content_part.added",
                                         "response.reasoning_summary_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_summary_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.reasoning_summary_text.done",
                                         "response.reasoning_summary_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",  // message
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",  // function call
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(names, want);
  ASSERT_EQ(events.size(), want.size());
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].data["response"]["output"], Json::array());
  EXPECT_TRUE(events[0].data["response"]["usage"].is_null());
  EXPECT_EQ(
      DumpJson(events[16].data),
      R"({"type":"response.output_text.delta","sequence_number":16,"item_id":"msg_00c0ffee00000007_1","output_index":1,"content_index":0,"delta":"Hello","logprobs":[]})");
  EXPECT_EQ(
      DumpJson(events[22].data),
      R"({"type":"response.function_call_arguments.done","sequence_number":22,"item_id":"fc_00c0ffee00000007_2","output_index":2,"name":"weather","arguments":"{\"city\":\"Paris\"}"})");
  EXPECT_EQ(events[7].data["delta"], "ink");
  EXPECT_EQ(events[9].data["text"], "think");
  EXPECT_EQ(events[20].data["item"]["status"], "in_progress");
  EXPECT_EQ(events[20].data["item"]["arguments"], "");
  // The last event carries the same response a whole (non-streamed) request gets.
  ResponsesFormatter whole(kMeta, Options());
  EXPECT_EQ(events.back().data["response"], whole.Whole(Generated()));
}

TEST(ResponsesOutput, CutByMaxOutputTokensIsIncomplete) {
  GenerationResult r = Generated(FinishReason::kLength);
  r.tool_calls.clear();
  ResponsesFormatter whole(kMeta, Options());
  const Json response = whole.Whole(r);
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"], Json::parse(R"({"reason":"max_output_tokens"})"));
  EXPECT_EQ(response["output"][1]["status"], "incomplete");
  ResponsesFormatter streamed(kMeta, Options());
  std::vector<ParsedSseEvent> events = ParseSseEvents(Stream(streamed, r));
  EXPECT_EQ(events.back().name, "response.incomplete");
  EXPECT_EQ(events.back().data["response"], response);
}

TEST(ResponsesOutput, AFailedStreamSaysSoInBothShapes) {
  ResponseStore store;
  ResponsesFormatter f(kMeta, Options(&store));
  std::string sse;
  f.StreamStart(&sse);
  OutputDelta text;
  text.content = "Hel";
  f.StreamDelta(text, nullptr, &sse);
  ApiError error;
  error.http_status = 503;
  error.type = "unavailable_error";
  error.code = "stage_unavailable";
  error.message = "stage 1 is unavailable";
  f.StreamError(error, &sse);
  std::vector<ParsedSseEvent> events = ParseSseEvents(sse);
  ASSERT_GE(events.size(), 2u);
  const ParsedSseEvent& failed = events[events.size() - 2];
  EXPECT_EQ(failed.name, "response.failed");
  EXPECT_EQ(failed.data["response"]["status"], "failed");
  EXPECT_EQ(failed.data["response"]["error"],
            Json::parse(R"({"code":"stage_unavailable","message":"stage 1 is unavailable"})"));
  EXPECT_EQ(failed.data["response"]["output"][0]["status"], "incomplete");
  EXPECT_EQ(
      DumpJson(events.back().data),
      R"({"type":"error","sequence_number":)" + std::to_string(events.size() - 1) +
          R"(,"code":"stage_unavailable","message":"stage 1 is unavailable","param":null,"error":{"type":"unavailable_error","code":"stage_unavailable","message":"stage 1 is unavailable","param":null}})");
  EXPECT_EQ(store.responses(), 0u);  // a failed response is not kept
}

TEST(ResponsesOutput, AFinishedResponseIsKeptWithItsInput) {
  ResponseStore store;
  ResponsesOutputOptions options = Options(&store);
  options.previous_response_id = "resp_earlier";
  ResponsesFormatter f(kMeta, options);
  f.Whole(Generated());
  EXPECT_EQ(store.responses(), 1u);
  ASSERT_TRUE(store.Item("fc_00c0ffee00000007_2").has_value());
  EXPECT_EQ(store.Item("fc_00c0ffee00000007_2").value()["call_id"], "call_x_0");
  // Its chain starts at a response this store never had.
  EXPECT_EQ(store.Conversation(kMeta.id).status().code(), StatusCode::kNotFound);
  store.Put("resp_earlier", "", Json::array(), Json::array());
  Result<Json> items = store.Conversation(kMeta.id);
  ASSERT_TRUE(items.ok()) << items.status().message();
  EXPECT_EQ(items->size(), 4u);  // the user message and the three output items
  EXPECT_EQ((*items)[0]["content"], "hi");
}

}  // namespace responses_output_test
}  // namespace shardlm::server
