// Parsing of POST /v1/responses into the chat request the template renders: every input item
// kind, tools and tool_choice, text.format, reasoning, the settings a response echoes, stored
// references, and errors that name the field.
#include "server/responses_api.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/chat_format.h"
#include "server/json_mutation.h"
#include "server/mock_engine.h"
#include "support/fixtures.h"
#include "support/sanitizer.h"

namespace shardlm::server {
namespace responses_api_test {

Result<ResponsesRequest> Parse(const std::string& body, std::string* param = nullptr,
                               const ResponseStore* store = nullptr) {
  return ResponsesRequestFromJSON(Json::parse(body), store, param);
}

// The parameter a refused request names.
std::string Refused(const std::string& body, const ResponseStore* store = nullptr) {
  std::string param;
  Result<ResponsesRequest> r = Parse(body, &param, store);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  return param;
}

TEST(ResponsesApi, StringInputInstructionsAndSettings) {
  auto r = Parse(R"({"model":"m","input":"hello","instructions":"be brief","stream":true,
    "max_output_tokens":32,"temperature":0.5,"top_p":0.9,"store":false,"metadata":{"k":"v"},
    "unknown":[1,2]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat.messages, Json::parse(R"([{"role":"system","content":"be brief"},
    {"role":"user","content":"hello"}])"));
  EXPECT_TRUE(r->chat.options.stream);
  EXPECT_EQ(r->chat.options.max_tokens, 32);
  EXPECT_EQ(r->chat.options.sampling.temperature, 0.5f);
  EXPECT_FALSE(r->store);
  EXPECT_TRUE(r->chat.tools.is_null());
  EXPECT_EQ(r->input_items, Json::parse(R"([{"type":"message","role":"user","content":"hello"}])"));
  const Json& e = r->echo;
  EXPECT_EQ(e["instructions"], "be brief");
  EXPECT_EQ(e["max_output_tokens"], 32);
  EXPECT_EQ(e["temperature"], 0.5);
  EXPECT_EQ(e["top_p"], 0.9);
  EXPECT_EQ(e["store"], false);
  EXPECT_EQ(e["metadata"], Json::parse(R"({"k":"v"})"));
  EXPECT_EQ(e["tools"], Json::array());
  EXPECT_EQ(e["tool_choice"], "auto");
  EXPECT_EQ(e["parallel_tool_calls"], true);
  EXPECT_EQ(e["text"], Json::parse(R"({"format":{"type":"text"}})"));
  EXPECT_TRUE(e["previous_response_id"].is_null());
}

TEST(ResponsesApi, EveryItemKindBecomesChatMessages) {
  auto r = Parse(R"({"input":[
    {"role":"developer","content":"rules"},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"wea"},
                                               {"type":"input_text","text":"ther?"}]},
    {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"short"}],
     "content":[{"type":"reasoning_text","text":"let me call"}]},
    {"type":"message","role":"assistant","id":"msg_1","status":"completed",
     "content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
    {"type":"function_call","id":"fc_1","call_id":"call_a","name":"weather",
     "arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call","call_id":"call_b","name":"time","arguments":"not json"},
    {"type":"function_call_output","call_id":"call_a","output":"sunny"},
    {"type":"function_call_output","call_id":"call_b",
     "output":[{"type":"input_text","text":"noon"}]},
    {"type":"reasoning","summary":[{"type":"summary_text","text":"only a summary"}]},
    {"role":"assistant","content":"Sunny at noon."},
    {"role":"system","content":"late system"}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat.messages, Json::parse(R"([
    {"role":"system","content":"rules"},
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":"Checking.","reasoning_content":"let me call",
     "tool_calls":[
       {"id":"call_a","type":"function","function":{"name":"weather","arguments":{"city":"Paris"}}},
       {"id":"call_b","type":"function","function":{"name":"time","arguments":"not json"}}]},
    {"role":"tool","tool_call_id":"call_a","content":"sunny"},
    {"role":"tool","tool_call_id":"call_b","content":"noon"},
    {"role":"assistant","content":"Sunny at noon.","reasoning_content":"only a summary"},
    {"role":"system","content":"late system"}])"));
  EXPECT_EQ(r->input_items.size(), 11u);
}

TEST(ResponsesApi, CallsAfterReasoningStartANewAssistantTurn) {
  auto r = Parse(R"({"input":[{"role":"user","content":"go"},
    {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"1"},
    {"type":"reasoning","content":[{"type":"reasoning_text","text":"again"}]},
    {"type":"function_call","call_id":"c2","name":"f","arguments":"{}"}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Json& m = r->chat.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1]["content"], "");
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[3]["reasoning_content"], "again");
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "c2");
}

TEST(ResponsesApi, ToolsToolChoiceTextFormatAndReasoning) {
  auto r = Parse(R"({"input":"x",
    "tools":[{"type":"function","name":"weather","description":"d",
              "parameters":{"type":"object"},"strict":true}],
    "tool_choice":{"type":"function","name":"weather"},
    "text":{"format":{"type":"json_schema","name":"out","strict":true,
                      "schema":{"type":"object","properties":{}}},"verbosity":"low"},
    "reasoning":{"effort":"high","summary":"auto"}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat.tools, Json::parse(R"([{"type":"function","function":{"name":"weather",
    "description":"d","parameters":{"type":"object"},"strict":true}}])"));
  EXPECT_EQ(r->chat.tool_choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(r->chat.tool_choice.function, "weather");
  const ResponseFormat& rf = r->chat.options.response_format;
  EXPECT_EQ(rf.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(rf.name, "out");
  EXPECT_TRUE(rf.strict);
  EXPECT_EQ(rf.schema["type"], "object");
  EXPECT_EQ(r->chat.chat_template_kwargs,
            Json::parse(R"({"enable_thinking":true,"reasoning_effort":"high"})"));
  EXPECT_EQ(r->echo["tools"][0]["name"], "weather");
  EXPECT_EQ(r->echo["tool_choice"]["name"], "weather");
  EXPECT_EQ(r->echo["reasoning"]["effort"], "high");
  EXPECT_EQ(r->echo["temperature"], 0.8);  // what the sampler uses when none is given
  EXPECT_EQ(r->echo["top_p"], 0.95);

  r = Parse(R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"none",
    "text":{"format":{"type":"json_object"}},"reasoning":{"effort":"none"}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->chat.tools.is_null());  // tool_choice none: the template is offered none
  EXPECT_EQ(r->chat.options.response_format.type, ResponseFormat::Type::kJsonObject);
  EXPECT_EQ(r->chat.chat_template_kwargs, Json::parse(R"({"enable_thinking":false})"));

  r = Parse(R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required"})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat.tool_choice.mode, ToolChoice::Mode::kRequired);
}

TEST(ResponsesApi, ErrorsNameTheField) {
  EXPECT_EQ(Refused(R"({"model":"m"})"), "input");
  EXPECT_EQ(Refused(R"({"input":[]})"), "input");
  EXPECT_EQ(Refused(R"({"input":7})"), "input");
  EXPECT_EQ(Refused(R"({"input":[{"role":"user","content":[{"type":"input_text","text":"a"},
    {"type":"input_image","image_url":"http://x"}]}]})"),
            "input[0].content[1].type");
  EXPECT_EQ(Refused(R"({"input":[{"role":"user","content":[{"type":"input_file"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(Refused(R"({"input":[{"role":"tool","content":"x"}]})"), "input[0].role");
  EXPECT_EQ(Refused(R"({"input":[{"role":"user"}]})"), "input[0].content");
  EXPECT_EQ(Refused(R"({"input":["hi"]})"), "input[0]");
  EXPECT_EQ(Refused(R"({"input":[{"type":"computer_call","id":"c"}]})"), "input[0].type");
  EXPECT_EQ(Refused(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})"),
            "input[0].call_id");
  EXPECT_EQ(Refused(R"({"input":[{"type":"function_call_output","call_id":"c"}]})"),
            "input[0].output");
  EXPECT_EQ(Refused(R"({"input":"x","tools":[{"type":"web_search"}]})"), "tools[0].type");
  EXPECT_EQ(Refused(R"({"input":"x","tools":[{"type":"function"}]})"), "tools[0].name");
  EXPECT_EQ(Refused(R"({"input":"x","tools":[{"type":"function","name":"f","parameters":1}]})"),
            "tools[0].parameters");
  EXPECT_EQ(Refused(R"({"input":"x","tool_choice":"required"})"), "tool_choice");
  EXPECT_EQ(Refused(R"({"input":"x","tools":[{"type":"function","name":"f"}],
    "tool_choice":{"type":"function","name":"g"}})"),
            "tool_choice");
  EXPECT_EQ(Refused(R"({"input":"x","tool_choice":{"type":"web_search_preview"}})"), "tool_choice");
  EXPECT_EQ(Refused(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})"),
            "text.format.schema");
  EXPECT_EQ(Refused(R"({"input":"x","text":{"format":{"type":"grammar"}}})"), "text.format.type");
  EXPECT_EQ(Refused(R"({"input":"x","max_output_tokens":0})"), "max_output_tokens");
  EXPECT_EQ(Refused(R"({"input":"x","temperature":"hot"})"), "temperature");
  EXPECT_EQ(Refused(R"({"input":"x","reasoning":{"effort":3}})"), "reasoning.effort");
  EXPECT_EQ(Refused(R"({"input":"x","background":true})"), "background");
  EXPECT_EQ(Refused(R"({"input":"x","conversation":"conv_1"})"), "conversation");
  EXPECT_EQ(Refused(R"({"input":"x","top_logprobs":2})"), "top_logprobs");
  EXPECT_EQ(Refused(R"({"input":"x","metadata":[]})"), "metadata");
  EXPECT_EQ(Refused(R"({"input":"x","store":"yes"})"), "store");
  // Nothing is stored without a store: references are errors that say so.
  EXPECT_EQ(Refused(R"({"input":"x","previous_response_id":"resp_1"})"), "previous_response_id");
  EXPECT_EQ(Refused(R"({"input":[{"type":"item_reference","id":"msg_1"}]})"), "input[0].id");
}

TEST(ResponsesApi, DeepFunctionCallArgumentsAreRefused) {
  std::string deep = std::string(100, '[') + std::string(100, ']');
  Json body = Json{
      {"input",
       Json::array({Json{
           {"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", deep}}})}};
  std::string param;
  auto r = ResponsesRequestFromJSON(body, nullptr, &param);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(param, "input[0].arguments");
}

TEST(ResponsesApi, StoredItemsAndConversationsAreResolved) {
  ResponseStore store;
  store.Put("resp_a", "",
            Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", "first"}}}),
            Json::array({Json{{"id", "rs_a_0"},
                              {"type", "reasoning"},
                              {"summary", Json::array()},
                              {"content", Json::parse(R"([{"type":"reasoning_text",
                                                           "text":"hmm"}])")}},
                         Json{{"id", "fc_a_1"},
                              {"type", "function_call"},
                              {"call_id", "call_1"},
                              {"name", "f"},
                              {"arguments", "{}"}}}));
  // What the Vercel AI SDK sends in a tool loop: references to the output, then the result.
  std::string param;
  auto r = Parse(R"({"input":[{"role":"user","content":"first"},
    {"type":"item_reference","id":"rs_a_0"},{"type":"item_reference","id":"fc_a_1"},
    {"type":"function_call_output","call_id":"call_1","output":"42"}]})",
                 &param, &store);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chat.messages, Json::parse(R"([{"role":"user","content":"first"},
    {"role":"assistant","content":"","reasoning_content":"hmm",
     "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":{}}}]},
    {"role":"tool","tool_call_id":"call_1","content":"42"}])"));
  EXPECT_EQ(r->input_items[2]["type"], "function_call");  // stored resolved, not as references

  r = Parse(R"({"previous_response_id":"resp_a","instructions":"sys",
    "input":[{"type":"function_call_output","call_id":"call_1","output":"42"}]})",
            &param, &store);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Json& m = r->chat.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], Json::parse(R"({"role":"system","content":"sys"})"));
  EXPECT_EQ(m[1]["content"], "first");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(r->previous_response_id, "resp_a");
  EXPECT_EQ(r->echo["previous_response_id"], "resp_a");
  EXPECT_EQ(r->input_items.size(), 1u);  // only this turn's own input

  EXPECT_EQ(Refused(R"({"input":"x","previous_response_id":"resp_zz"})", &store),
            "previous_response_id");
  EXPECT_EQ(Refused(R"({"input":[{"type":"item_reference","id":"fc_zz"}]})", &store),
            "input[0].id");
}

// Random mutations of valid requests: the parser returns ok or an error naming a field, never
// throws or crashes, and what it accepts renders (or fails with a Status) through ChatML and
// the Qwen3 template of the fixtures, which knows tools and thinking.
TEST(ResponsesApi, FuzzParserNeverCrashes) {
  const std::string seeds[] = {
      R"({"model":"m","input":"hi","instructions":"s","max_output_tokens":5,"stream":true,"temperature":0.5,"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}},"reasoning":{"effort":"low"}})",
      R"({"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"reasoning","summary":[{"type":"summary_text","text":"r"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":[1]}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"}})",
      R"({"input":[{"type":"item_reference","id":"fc_1"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"t"}]}],"previous_response_id":"resp_1","store":false})",
  };
  ResponseStore store;
  store.Put("resp_1", "", Json::parse(R"([{"type":"message","role":"user","content":"q"}])"),
            Json::parse(R"([{"id":"fc_1","type":"function_call","call_id":"c","name":"f",
                             "arguments":"{}"}])"));
  const int ok =
      FuzzThroughTemplates(seeds, 4321, shardlm::testing::CasesUnlessSanitized(6000),
                           [&](const Json& body) -> std::optional<ChatCompletionRequest> {
                             std::string param;
                             auto r = ResponsesRequestFromJSON(body, &store, &param);
                             if (!r.ok()) return std::nullopt;
                             return std::move(r->chat);
                           });
  EXPECT_GT(ok, 100);
}

}  // namespace responses_api_test
}  // namespace shardlm::server
