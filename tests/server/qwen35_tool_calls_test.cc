// Qwen3.5's tool calls (<tool_call><function=NAME><parameter=KEY>…</tool_call>): the parser
// reads them whole and byte by byte, a call the fixture template writes comes back as the
// same call, malformed blocks come back as content, the prompt's open <think> sends the
// reasoning to its own field, and a forced call is written in this syntax.
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_test_util.h"
#include "server/chat_format.h"
#include "server/mock_engine.h"
#include "server/output_constraint.h"
#include "support/fixtures.h"

namespace shardlm::server {
namespace qwen35_tool_calls_test {

using grammar::testing::Accepts;
using grammar::testing::AcceptsPrefix;

// Everything a parser gives for `text`, pushed in pieces of `step` bytes (0: at once).
OutputDelta ParseAll(const std::string& text, size_t step, bool in_reasoning = false,
                     Json tools = Json()) {
  OutputParser parser(in_reasoning, /*parse_tools=*/true, "call_", kThinkTags, std::move(tools));
  OutputDelta all;
  auto add = [&](OutputDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (ToolCall& call : d.tool_calls) all.tool_calls.push_back(std::move(call));
  };
  if (step == 0) step = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += step) add(parser.Push(text.substr(i, step)));
  add(parser.Finish());
  return all;
}

constexpr char kWeatherCall[] =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

TEST(Qwen35ToolCalls, ParsedWholeAndByteByByte) {
  const std::string text = std::string("Let me check.\n\n") + kWeatherCall;
  for (size_t step : {0, 1, 2, 7}) {
    SCOPED_TRACE(step);
    OutputDelta all = ParseAll(text, step);
    EXPECT_EQ(all.content, "Let me check.\n\n");
    ASSERT_EQ(all.tool_calls.size(), 1u);
    EXPECT_EQ(all.tool_calls[0].name, "get_weather");
    EXPECT_EQ(all.tool_calls[0].arguments, R"({"city":"New York","days":3})");
    EXPECT_EQ(all.tool_calls[0].id, "call_0");
  }
}

// A delta never ends inside a tag: text that may begin one is held until it is told apart.
TEST(Qwen35ToolCalls, NoDeltaSplitsATag) {
  OutputParser parser(false, true, "c");
  EXPECT_EQ(parser.Push("ok <tool_").content, "ok ");
  OutputDelta d = parser.Push("call>\n<function=f>\n<parameter=a>\n1\n</param");
  EXPECT_TRUE(d.empty());
  d = parser.Push("eter>\n</function>\n</tool_call>done");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(d.content, "done");
}

TEST(Qwen35ToolCalls, ValuesAreJsonOrText) {
  const std::string text =
      "<tool_call>\n<function=f>\n"
      "<parameter=s>\nline one\nline two\n</parameter>\n"
      "<parameter=quoted>\n\"hi\"\n</parameter>\n"
      "<parameter=n>\n-2.5\n</parameter>\n"
      "<parameter=b>\nTrue\n</parameter>\n"
      "<parameter=z>\nNone\n</parameter>\n"
      "<parameter=o>\n{\"k\": [1, \"x\"]}\n</parameter>\n"
      "<parameter=tag>\n</tool_call> is text here\n</parameter>\n"
      "</function>\n</tool_call>";
  OutputDelta all = ParseAll(text, 1);
  ASSERT_EQ(all.tool_calls.size(), 1u) << all.content;
  EXPECT_EQ(Json::parse(all.tool_calls[0].arguments), Json::parse(R"({"s":"line one\nline two",
      "quoted":"\"hi\"","n":-2.5,"b":true,"z":null,"o":{"k":[1,"x"]},
      "tag":"</tool_call> is text here"})"));
}

// A property the tool declares a string keeps its text, even text that reads as JSON.
TEST(Qwen35ToolCalls, TheSchemaSaysWhichValuesAreStrings) {
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":{
      "type":"object","properties":{"code":{"type":"string"},"flag":{"type":"string"},
      "n":{"type":"integer"}}}}}])");
  const std::string text =
      "<tool_call>\n<function=f>\n<parameter=code>\n042\n</parameter>\n"
      "<parameter=flag>\nTrue\n</parameter>\n<parameter=n>\n42\n</parameter>\n"
      "<parameter=other>\n[1]\n</parameter>\n</function>\n</tool_call>";
  OutputDelta typed = ParseAll(text, 1, false, tools);
  ASSERT_EQ(typed.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(typed.tool_calls[0].arguments),
            Json::parse(R"({"code":"042","flag":"True","n":42,"other":[1]})"));
  // Another tool's schema, or none, says nothing about f's arguments.
  OutputDelta untyped = ParseAll(text, 0);
  ASSERT_EQ(untyped.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(untyped.tool_calls[0].arguments)["flag"], true);
}

TEST(Qwen35ToolCalls, TwoCallsAndTheJsonFormBesideThem) {
  const std::string text =
      std::string(kWeatherCall) +
      "\n<tool_call>\n<function=now>\n</function>\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"j\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  OutputDelta all = ParseAll(text, 3);
  ASSERT_EQ(all.tool_calls.size(), 3u);
  EXPECT_EQ(all.tool_calls[1].name, "now");
  EXPECT_EQ(all.tool_calls[1].arguments, "{}");
  EXPECT_EQ(all.tool_calls[2].name, "j");
  EXPECT_EQ(all.tool_calls[2].id, "call_2");
}

// Whatever is not a well-formed call is handed back as the model wrote it.
TEST(Qwen35ToolCalls, MalformedBlocksAreContent) {
  for (const std::string body : {
           "<function=f>\n<parameter=a>\n1\n</function>\n",                // unterminated parameter
           "<function=f>\n<parameter=a b>\n1\n</parameter>\n</function>",  // blank in a name
           "<function=f>\n<parameter=>\n1\n</parameter>\n</function>",     // empty name
           "<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n"
           "</function>",                                             // the same name twice
           "<function=f>\n<function=g>\n</function>\n</function>",    // nested function
           "<function=f>\nstray text\n</function>",                   // text between blocks
           "<function=f>\n</function> trailing",                      // text after the function
           "<function=f>\n<tool_call>\n<function=g>\n</function>\n",  // nested call
           "<function=>\n</function>",                                // no name
       }) {
    SCOPED_TRACE(body);
    const std::string text = "<tool_call>\n" + body + "\n</tool_call>";
    OutputDelta all = ParseAll(text, 1);
    EXPECT_TRUE(all.tool_calls.empty());
    EXPECT_EQ(all.content, text);
  }
}

// Output that ends inside a call: the call when it is complete but for </tool_call>,
// otherwise the text, without a closing tag the model never wrote.
TEST(Qwen35ToolCalls, OutputEndingInsideACall) {
  OutputDelta all = ParseAll("<tool_call>\n<function=f>\n</function>\n", 1);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "f");
  all = ParseAll("<tool_call>\n<function=f>\n<parameter=a>\nhal", 1);
  EXPECT_TRUE(all.tool_calls.empty());
  EXPECT_EQ(all.content, "<tool_call>\n<function=f>\n<parameter=a>\nhal");
}

// Truncations and byte flips of a call never crash and never lose text: what is not a call
// comes back as content.
TEST(Qwen35ToolCalls, MutatedCallsNeverCrash) {
  const std::string call = kWeatherCall;
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = call.substr(0, rng() % (call.size() + 1));
    for (int flips = int(rng() % 3); flips > 0 && !text.empty(); --flips) {
      text[rng() % text.size()] = "<>=/\n x"[rng() % 7];
    }
    OutputDelta all = ParseAll(text, 1 + rng() % 5);
    if (all.tool_calls.empty()) {
      EXPECT_FALSE(all.content.empty() && text.find_first_not_of(" \n") != std::string::npos)
          << text;
    }
  }
}

ChatCompletionRequest Request(const std::string& body) {
  Result<ChatCompletionRequest> r = ChatCompletionRequestFromJSON(Json::parse(body));
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : ChatCompletionRequest{};
}

ChatFormatter Qwen35(MockTokenizer& tokenizer) {
  Result<ChatFormatter> formatter = ChatFormatter::Create(
      testing::ReadTextFile(testing::FixturePath("templates/Qwen3.5-4B.jinja")), tokenizer);
  EXPECT_TRUE(formatter.ok()) << formatter.status().message();
  return std::move(formatter).value();
}

constexpr char kTools[] = R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"},"days":{"type":"integer"},
    "unit":{"type":"string","enum":["C","F"]},"flags":{"type":"object"}},
    "required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])";

TEST(Qwen35ToolCalls, TheTemplateWritesThemAndItsPromptOpensThink) {
  SHARDLM_REQUIRE_FIXTURES();
  MockTokenizer tokenizer;
  ChatFormatter formatter = Qwen35(tokenizer);
  EXPECT_EQ(formatter.tool_call_syntax(), ToolCallSyntax::kXml);
  EXPECT_TRUE(formatter.writes_tool_calls());
  EXPECT_EQ(formatter.reasoning_tags().open, "<think>");

  const std::string question = R"({"messages":[{"role":"user","content":"hi"}])";
  Result<ChatPrompt> thinking = formatter.Tokenize(Request(question + "}"), tokenizer);
  ASSERT_TRUE(thinking.ok()) << thinking.status().message();
  EXPECT_TRUE(thinking->opens_reasoning);
  Result<ChatPrompt> direct = formatter.Tokenize(
      Request(question + R"(,"chat_template_kwargs":{"enable_thinking":false}})"), tokenizer);
  ASSERT_TRUE(direct.ok()) << direct.status().message();
  EXPECT_FALSE(direct->opens_reasoning);

  // The model goes on from "<think>\n": its reasoning, then its call.
  OutputDelta all = ParseAll(std::string("Rain likely.\n</think>\n\n") + kWeatherCall, 1,
                             /*in_reasoning=*/true);
  EXPECT_EQ(all.reasoning, "Rain likely.\n");
  EXPECT_EQ(all.content, "");
  ASSERT_EQ(all.tool_calls.size(), 1u);
}

// The calls the template writes for an assistant turn, values of every JSON type, come back
// out of the parser as the same calls.
TEST(Qwen35ToolCalls, RenderThenParseRoundTrips) {
  SHARDLM_REQUIRE_FIXTURES();
  MockTokenizer tokenizer;
  ChatFormatter formatter = Qwen35(tokenizer);
  const Json arguments[] = {
      Json::parse(R"({"city":"Paris","days":3})"),
      Json::parse(R"({"text":"two\nlines","ratio":0.25,"on":true,"off":false,"none":null})"),
      Json::parse(R"({"list":[1,"a",{"b":null}],"map":{"k":"v"},"empty":""})"),
      Json::object(),
  };
  Json calls = Json::array();
  for (size_t i = 0; i < std::size(arguments); ++i) {
    calls.push_back(
        {{"id", "c" + std::to_string(i)},
         {"type", "function"},
         {"function", {{"name", "f" + std::to_string(i)}, {"arguments", arguments[i]}}}});
  }
  Json body = {
      {"messages",
       Json::array({{{"role", "user"}, {"content", "go"}},
                    {{"role", "assistant"}, {"content", "Calling."}, {"tool_calls", calls}}})},
      {"tools", Json::parse(kTools)}};
  Result<std::string> rendered = formatter.Render(Request(body.dump()));
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const size_t begin = rendered->find("<|im_start|>assistant\n");
  const size_t end = rendered->find("<|im_end|>", begin);
  ASSERT_NE(end, std::string::npos);
  const std::string turn = rendered->substr(begin + 22, end - begin - 22);
  for (size_t step : {0, 1}) {
    OutputDelta all = ParseAll(turn, step, /*in_reasoning=*/false);
    EXPECT_EQ(all.content, "Calling.\n\n") << turn;
    ASSERT_EQ(all.tool_calls.size(), std::size(arguments)) << turn;
    for (size_t i = 0; i < std::size(arguments); ++i) {
      EXPECT_EQ(all.tool_calls[i].name, "f" + std::to_string(i));
      EXPECT_EQ(Json::parse(all.tool_calls[i].arguments), arguments[i]) << turn;
    }
  }
}

OutputGrammar ForcedGrammar(const std::string& choice, bool in_reasoning = false) {
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kXml;
  context.in_reasoning = in_reasoning;
  std::string param;
  Result<OutputGrammar> g = ChatOutputConstraint(
      Request(std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kTools +
              R"(,"tool_choice":)" + choice + "}"),
      context, &param);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : nullptr;
}

TEST(Qwen35ToolCalls, AForcedCallIsWrittenInThisSyntax) {
  OutputGrammar g = ForcedGrammar(R"({"type":"function","function":{"name":"get_weather"}})");
  ASSERT_NE(g, nullptr);
  const std::string full =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\nor <b>Rio</b>\n"
      "</parameter>\n<parameter=days>\n2\n</parameter>\n<parameter=unit>\nC\n</parameter>\n"
      "<parameter=flags>\n{\"fast\": true}\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(Accepts(*g, full));
  EXPECT_TRUE(Accepts(*g,
                      "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n"
                      "</function>\n</tool_call>"));
  // city is required, unit is one of its values, days is an integer, the JSON form is not
  // this template's, and the named tool is the only one.
  EXPECT_FALSE(Accepts(*g, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));
  EXPECT_FALSE(AcceptsPrefix(*g,
                             "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n"
                             "</parameter>\n<parameter=unit>\nK"));
  EXPECT_FALSE(AcceptsPrefix(*g,
                             "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n"
                             "</parameter>\n<parameter=days>\nthree"));
  EXPECT_FALSE(AcceptsPrefix(*g, "<tool_call>\n{"));
  EXPECT_FALSE(AcceptsPrefix(*g, "<tool_call>\n<function=now>"));

  // What the grammar accepts, the parser reads as the call, a string that looks like a
  // number included.
  OutputDelta all = ParseAll(full, 1, false, Json::parse(kTools));
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(all.tool_calls[0].arguments),
            Json::parse(R"({"city":"São Paulo\nor <b>Rio</b>","days":2,"unit":"C",
                "flags":{"fast":true}})"));
  const std::string numeric =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n10001\n</parameter>\n"
      "</function>\n</tool_call>";
  EXPECT_TRUE(Accepts(*g, numeric));
  all = ParseAll(numeric, 1, false, Json::parse(kTools));
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"city":"10001"})");
}

TEST(Qwen35ToolCalls, RequiredIsAnyToolAfterTheReasoning) {
  OutputGrammar g = ForcedGrammar(R"("required")", /*in_reasoning=*/true);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g,
                      "Time.\n</think>\n\n<tool_call>\n<function=now>\n</function>\n"
                      "</tool_call>"));
  EXPECT_FALSE(Accepts(*g, "<tool_call>\n<function=now>\n</function>\n</tool_call>"));
  EXPECT_FALSE(AcceptsPrefix(*g, "x</think>\n\n<tool_call>\n<function=now>\n<parameter="));
}

// The calls the template writes, the grammar accepts: forcing writes what the model knows.
TEST(Qwen35ToolCalls, TheGrammarAcceptsWhatTheTemplateWrites) {
  SHARDLM_REQUIRE_FIXTURES();
  MockTokenizer tokenizer;
  ChatFormatter formatter = Qwen35(tokenizer);
  Json body = {{"messages", Json::parse(R"([{"role":"user","content":"go"},{"role":"assistant",
        "content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather",
        "arguments":{"city":"Oslo","days":2,"unit":"F","flags":{"a":[1]}}}}]}])")},
               {"tools", Json::parse(kTools)}};
  Result<std::string> rendered = formatter.Render(Request(body.dump()));
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const size_t begin = rendered->rfind("<tool_call>");
  const std::string written = rendered->substr(begin, rendered->find("<|im_end|>", begin) - begin);
  OutputGrammar g = ForcedGrammar(R"("required")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, written)) << written;
}

// Tools this syntax cannot carry are refused by name, not forced into text the parser
// would not read.
TEST(Qwen35ToolCalls, ToolsTheSyntaxCannotCarryAreRefused) {
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kXml;
  for (const char* tools : {
           R"([{"type":"function","function":{"name":"has space"}}])",
           R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
               "properties":{"a<b":{"type":"string"}}}}}])",
           R"([{"type":"function","function":{"name":"f","parameters":{"anyOf":[
               {"type":"object"}]}}}])",
       }) {
    std::string param;
    Result<OutputGrammar> g = ChatOutputConstraint(
        Request(std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + tools +
                R"(,"tool_choice":"required"})"),
        context, &param);
    ASSERT_FALSE(g.ok()) << tools;
    EXPECT_EQ(param, "tools");
    EXPECT_NE(g.status().message().find("tools[0].function.parameters"), std::string::npos)
        << g.status().message();
  }
}

}  // namespace qwen35_tool_calls_test
}  // namespace shardlm::server
