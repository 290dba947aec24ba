// Gemma 4's tool calls (<|tool_call>call:NAME{ARGS}<tool_call|>, ARGS in Gemma's notation):
// the parser reads them whole and split at every byte, values of every kind, calls beside
// the thought channel; malformed and truncated calls come back as content and random ones
// never crash; a Gemma-style template is told apart by its tags and its calls come back out
// of the parser as the calls that went in; a forced call is written in this syntax, and
// what its grammar accepts the parser reads.
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_test_util.h"
#include "server/chat_format.h"
#include "server/mock_engine.h"
#include "server/output_constraint.h"
#include "server/tool_template.h"

namespace shardlm::server {
namespace gemma4_tool_calls_test {

using grammar::testing::Accepts;
using grammar::testing::AcceptsPrefix;

// The same JSON text, keys in any order (Gemma's template sorts them).
bool SameJson(const std::string& a, const Json& b) {
  return nlohmann::json::parse(a) == nlohmann::json::parse(b.dump());
}

OutputDelta& Add(OutputDelta& all, OutputDelta d) {
  all.content += d.content;
  all.reasoning += d.reasoning;
  for (ToolCall& call : d.tool_calls) all.tool_calls.push_back(std::move(call));
  return all;
}

OutputParser Parser(bool in_reasoning = false) {
  return OutputParser(in_reasoning, /*parse_tools=*/true, "call_", kThoughtChannelTags, Json(),
                      kGemmaToolCallTags);
}

// Everything a parser gives for `text`, pushed in pieces of `step` bytes (0: at once).
OutputDelta ParseAll(const std::string& text, size_t step, bool in_reasoning = false) {
  OutputParser parser = Parser(in_reasoning);
  OutputDelta all;
  if (step == 0) step = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += step) Add(all, parser.Push(text.substr(i, step)));
  return Add(all, parser.Finish());
}

// `text` pushed as two pieces split at `at`.
OutputDelta ParseSplit(const std::string& text, size_t at) {
  OutputParser parser = Parser();
  OutputDelta all;
  Add(all, parser.Push(text.substr(0, at)));
  Add(all, parser.Push(text.substr(at)));
  return Add(all, parser.Finish());
}

std::string Call(const std::string& name, const std::string& args) {
  return "<|tool_call>call:" + name + args + "<tool_call|>";
}

const std::string kWeather = Call("get_weather", R"({city:<|"|>New York<|"|>,days:3})");

TEST(Gemma4ToolCalls, ParsedWholeAndSplitAtEveryByte) {
  const std::string text = "Let me check." + kWeather;
  for (size_t at = 0; at <= text.size(); ++at) {
    SCOPED_TRACE(at);
    OutputDelta all = ParseSplit(text, at);
    EXPECT_EQ(all.content, "Let me check.");
    ASSERT_EQ(all.tool_calls.size(), 1u);
    EXPECT_EQ(all.tool_calls[0].name, "get_weather");
    EXPECT_EQ(all.tool_calls[0].arguments, R"({"city":"New York","days":3})");
    EXPECT_EQ(all.tool_calls[0].id, "call_0");
  }
  OutputDelta bytes = ParseAll(text, 1);
  ASSERT_EQ(bytes.tool_calls.size(), 1u);
  EXPECT_EQ(bytes.content, "Let me check.");
}

// A delta never ends inside a tag or a call: text that may begin one is held back.
TEST(Gemma4ToolCalls, NoDeltaSplitsATagOrACall) {
  OutputParser parser = Parser();
  EXPECT_EQ(parser.Push("ok <|tool_").content, "ok ");
  OutputDelta d = parser.Push("call>call:f{a:<|\"|>x<tool_call|>y<|");
  EXPECT_TRUE(d.empty());
  d = parser.Push("\"|>}<tool_call|>done");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"a":"x<tool_call|>y"})");
  EXPECT_EQ(d.content, "done");
}

TEST(Gemma4ToolCalls, ValuesOfEveryKind) {
  const std::string args =
      R"({s:<|"|>two "quoted"\n{lines}, [a,b]: c<tool_call|><|"|>,)"
      R"(n:-2.5,e:1e-05,z:0,big:12345678901,t:true,f:false,none:None,nul:null,)"
      R"(o:{k:[1,<|"|>x<|"|>,{deep:[]}],empty:{}},list:[],)"
      R"(json:"a\"b\u00e9",<|"|>quoted key<|"|>:1,"json key":2})";
  for (size_t step : {size_t{0}, size_t{1}, size_t{5}}) {
    SCOPED_TRACE(step);
    OutputDelta all = ParseAll(Call("f", args), step);
    ASSERT_EQ(all.tool_calls.size(), 1u) << all.content;
    EXPECT_TRUE(SameJson(all.tool_calls[0].arguments, Json::parse(R"({
        "s":"two \"quoted\"\\n{lines}, [a,b]: c<tool_call|>","n":-2.5,"e":1e-05,"z":0,
        "big":12345678901,"t":true,"f":false,"none":null,"nul":null,
        "o":{"k":[1,"x",{"deep":[]}],"empty":{}},"list":[],"json":"a\"bé",
        "quoted key":1,"json key":2})")))
        << all.tool_calls[0].arguments;
  }
  // A string's text is raw: a real newline stays one, and nothing is unescaped.
  OutputDelta raw = ParseAll(Call("f", "{s:<|\"|>a\nb\\n<|\"|>}"), 1);
  ASSERT_EQ(raw.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(raw.tool_calls[0].arguments)["s"], "a\nb\\n");
}

// Blanks a model may put between tokens are read past; keys keep their order.
TEST(Gemma4ToolCalls, BlanksBetweenTokens) {
  OutputDelta all = ParseAll(Call(" f ", "{ b : 1 ,\n a : [ 2 , { c : true } ] }\n"), 1);
  ASSERT_EQ(all.tool_calls.size(), 1u) << all.content;
  EXPECT_EQ(all.tool_calls[0].name, "f");
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"b":1,"a":[2,{"c":true}]})");
}

TEST(Gemma4ToolCalls, CallsBackToBackAndBetweenText) {
  const std::string text = "A." + Call("now", "{}") + Call("add", "{a:1,b:2}") + "\nB." +
                           Call("echo", R"({t:<|"|><|"|>})");
  for (size_t step : {size_t{0}, size_t{1}, size_t{4}}) {
    OutputDelta all = ParseAll(text, step);
    EXPECT_EQ(all.content, "A.B.");  // blanks right after a call start no content
    ASSERT_EQ(all.tool_calls.size(), 3u);
    EXPECT_EQ(all.tool_calls[0].arguments, "{}");
    EXPECT_EQ(all.tool_calls[1].arguments, R"({"a":1,"b":2})");
    EXPECT_EQ(all.tool_calls[2].arguments, R"({"t":""})");
    EXPECT_EQ(all.tool_calls[2].id, "call_2");
  }
}

// Thinking, then content, then a call: each goes to its own field; a stray closing channel
// tag (the model closes an empty channel it never opened) is dropped, not shown.
TEST(Gemma4ToolCalls, BesideTheThoughtChannel) {
  const std::string text =
      "<|channel>thought\nThe user wants weather.<channel|>Checking.<channel|>" + kWeather;
  for (size_t step : {size_t{0}, size_t{1}, size_t{3}}) {
    OutputDelta all = ParseAll(text, step);
    EXPECT_EQ(all.reasoning, "The user wants weather.");
    EXPECT_EQ(all.content, "Checking.");
    ASSERT_EQ(all.tool_calls.size(), 1u);
  }
  // The prompt opened the channel.
  OutputDelta all = ParseAll("Plan.<channel|>" + kWeather, 1, /*in_reasoning=*/true);
  EXPECT_EQ(all.reasoning, "Plan.");
  EXPECT_EQ(all.content, "");
  ASSERT_EQ(all.tool_calls.size(), 1u);
  // Without tools offered a call is content, as the model wrote it.
  OutputParser no_tools(false, /*parse_tools=*/false, "c", kThoughtChannelTags, Json(),
                        kGemmaToolCallTags);
  OutputDelta text_only = no_tools.Push(kWeather);
  Add(text_only, no_tools.Finish());
  EXPECT_EQ(text_only.content, kWeather);
  EXPECT_TRUE(text_only.tool_calls.empty());
}

// Whatever is not a well-formed call is handed back as the model wrote it.
TEST(Gemma4ToolCalls, MalformedCallsAreContent) {
  for (const std::string body : {
           "call:f{a:1",                       // no closing brace
           "call:f{a:<|\"|>x}",                // unterminated string
           "call:f{a}",                        // key without value
           "call:f{a:}",                       // no value
           "call:f{:1}",                       // empty key
           "call:f{a:1,}",                     // trailing comma
           "call:f{a:1,a:2}",                  // the same key twice
           "call:f{a:Paris}",                  // a bare word
           "call:f{a:True}",                   // Python's spelling of a boolean
           "call:f{a:1.}",                     // not a number
           "call:f{a:+1}",                     // not a number either
           "call:f{a:[1,2}",                   // unclosed list
           "call:f{a:1} trailing",             // text after the arguments
           "call:f{a:1}{b:2}",                 // two argument objects
           "call:f[1]",                        // arguments that are not an object
           "call:{a:1}",                       // no name
           "call:my tool{a:1}",                // a blank in the name
           "call:f",                           // no arguments at all
           "f{a:1}",                           // no call: prefix
           "call:f{a:\"x}",                    // unterminated JSON string
           "call:f{<|\"|>k<|\"|><|\"|>:1}",    // a marker inside a key
           "call:f{a:1}<|tool_call>call:g{}",  // nested call
       }) {
    SCOPED_TRACE(body);
    const std::string text = "<|tool_call>" + body + "<tool_call|>";
    OutputDelta all = ParseAll(text, 1);
    EXPECT_TRUE(all.tool_calls.empty());
    EXPECT_EQ(all.content, text);
  }
}

// Output that ends inside a call: the call when it is complete but for <tool_call|>,
// otherwise the text, without a closing tag the model never wrote.
TEST(Gemma4ToolCalls, OutputEndingInsideACall) {
  OutputDelta all = ParseAll("<|tool_call>call:f{a:1}", 1);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"a":1})");
  for (const std::string text : {"<|tool_call>", "<|tool_call>call:f{a:<|\"|>hal",
                                 "<|tool_call>call:f{a:<|\"|>x<|\"|>,b:"}) {
    all = ParseAll(text, 1);
    EXPECT_TRUE(all.tool_calls.empty());
    EXPECT_EQ(all.content, text);
  }
}

// Nesting is bounded like any JSON the server reads: 64 levels are read, deeper is content,
// and a runaway depth neither crashes nor takes long.
TEST(Gemma4ToolCalls, NestingIsBounded) {
  auto deep = [](int levels) {
    std::string args;
    for (int i = 0; i < levels - 1; ++i) args += "{a:";
    args += "{}" + std::string(size_t(levels - 1), '}');
    return Call("f", args);
  };
  EXPECT_EQ(ParseAll(deep(64), 0).tool_calls.size(), 1u);
  OutputDelta too_deep = ParseAll(deep(65), 0);
  EXPECT_TRUE(too_deep.tool_calls.empty());
  EXPECT_EQ(too_deep.content, deep(65));
  EXPECT_TRUE(ParseAll(deep(100000), 0).tool_calls.empty());
  std::string lists = Call("f", "{a:" + std::string(100000, '[') + "}");
  EXPECT_EQ(ParseAll(lists, 0).content, lists);
}

// The notation of a JSON value as Gemma's template writes it (keys in the value's order).
std::string Gemma(const Json& v) {
  if (v.is_string()) return "<|\"|>" + v.get<std::string>() + "<|\"|>";
  if (v.is_null()) return "None";
  if (v.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, unused] : v.items()) keys.push_back(k);
    std::string out = "{";
    for (const std::string& k : keys) out += (out.size() > 1 ? "," : "") + k + ":" + Gemma(v[k]);
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const Json& item : v) out += (out.size() > 1 ? "," : "") + Gemma(item);
    return out + "]";
  }
  return v.dump();
}

// A random value: strings of tricky pieces (never the <|"|> marker), keys of word bytes.
Json RandomValue(std::mt19937& rng, int depth) {
  const std::vector<std::string> pieces = {"a", " ", "<", ">",  "|",  "\"", "\\", "{",  "}",   "[",
                                           "]", ",", ":", "\n", "\t", "é",  "<|", "|>", "None"};
  switch (rng() % (depth < 4 ? 7 : 4)) {
    case 0: {
      std::string s;
      for (int n = int(rng() % 8); n > 0; --n) s += pieces[rng() % pieces.size()];
      if (s.find(kGemmaQuote) != std::string::npos) s = "ok";
      return s;
    }
    case 1:
      return int64_t(rng() % 2000) - 1000;
    case 2:
      return double(int(rng() % 2000) - 1000) / 8;
    case 3:
      return rng() % 3 == 0 ? Json(nullptr) : Json(rng() % 2 == 0);
    case 4:
    case 5: {
      Json object = Json::object();
      for (int n = int(rng() % 4); n > 0; --n) {
        object["k" + std::to_string(rng() % 10) + "_x"] = RandomValue(rng, depth + 1);
      }
      return object;
    }
    default: {
      Json array = Json::array();
      for (int n = int(rng() % 4); n > 0; --n) array.push_back(RandomValue(rng, depth + 1));
      return array;
    }
  }
}

// Random arguments written in Gemma's notation come back as the same JSON, whole and split.
TEST(Gemma4ToolCalls, RandomArgumentsRoundTrip) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 400; ++iter) {
    Json arguments = Json::object();
    for (int n = int(rng() % 5); n > 0; --n) {
      arguments["p" + std::to_string(rng() % 20)] = RandomValue(rng, 1);
    }
    const std::string text = "x" + Call("f", Gemma(arguments)) + "y";
    SCOPED_TRACE(text);
    OutputDelta all = iter % 2 ? ParseSplit(text, rng() % text.size()) : ParseAll(text, 1);
    ASSERT_EQ(all.tool_calls.size(), 1u) << all.content;
    EXPECT_TRUE(SameJson(all.tool_calls[0].arguments, arguments)) << all.tool_calls[0].arguments;
    EXPECT_EQ(all.content, "xy");
  }
}

// Truncations and byte flips of calls never crash and never lose text: what is not a call
// comes back as content.
TEST(Gemma4ToolCalls, MutatedCallsNeverCrash) {
  const std::string call = Call("f", R"({a:<|"|>x, y<|"|>,b:[1,{c:None}],d:-3.5e2})") + "tail";
  std::mt19937 rng(7);
  const std::string flips = "<>|\"{}[],:\n xN0";
  for (int iter = 0; iter < 5000; ++iter) {
    std::string text = call.substr(0, rng() % (call.size() + 1));
    for (int n = int(rng() % 3); n > 0 && !text.empty(); --n) {
      text[rng() % text.size()] = flips[rng() % flips.size()];
    }
    OutputDelta all = ParseAll(text, 1 + rng() % 6);
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

ChatFormatter GemmaFormatter(const Tokenizer& tokenizer) {
  Result<ChatFormatter> formatter = ChatFormatter::Create(kGemmaToolTemplate, tokenizer);
  EXPECT_TRUE(formatter.ok()) << formatter.status().message();
  return std::move(formatter).value();
}

TEST(Gemma4ToolCalls, TheTemplateTellsTheSyntax) {
  MockTokenizer tokenizer;
  ChatFormatter formatter = GemmaFormatter(tokenizer);
  EXPECT_EQ(formatter.tool_call_syntax(), ToolCallSyntax::kGemma);
  EXPECT_TRUE(formatter.writes_tool_calls());
  EXPECT_EQ(formatter.tool_call_tags().open, "<|tool_call>");
  EXPECT_EQ(formatter.reasoning_tags().open, "<|channel>thought");
}

// The calls the template writes for an assistant turn, values of every JSON type, come back
// out of the parser as the same calls.
TEST(Gemma4ToolCalls, RenderThenParseRoundTrips) {
  MockTokenizer tokenizer;
  ChatFormatter formatter = GemmaFormatter(tokenizer);
  const Json arguments[] = {
      Json::parse(R"({"city":"Paris","days":3})"),
      Json::parse(R"({"text":"two\nlines, \"quoted\"","ratio":0.25,"on":true,"off":false,
          "none":null})"),
      Json::parse(R"({"list":[1,"a",{"b":null}],"map":{"k":"v","Z":[]},"empty":""})"),
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
      {"tools", Json::parse(R"([{"type":"function","function":{"name":"f0"}}])")}};
  Result<std::string> rendered = formatter.Render(Request(body.dump()));
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const size_t begin = rendered->find("<|turn>model\n");
  const size_t end = rendered->find("<turn|>", begin);
  ASSERT_NE(end, std::string::npos) << *rendered;
  const std::string turn = rendered->substr(begin + 13, end - begin - 13);
  for (size_t step : {0, 1}) {
    OutputDelta all = ParseAll(turn, step);
    EXPECT_EQ(all.content, "Calling.") << turn;
    ASSERT_EQ(all.tool_calls.size(), std::size(arguments)) << turn;
    for (size_t i = 0; i < std::size(arguments); ++i) {
      EXPECT_EQ(all.tool_calls[i].name, "f" + std::to_string(i));
      EXPECT_TRUE(SameJson(all.tool_calls[i].arguments, arguments[i])) << turn;
    }
  }
}

// OpenAI's tool messages become the results Gemma's template writes inside the calling
// turn: matched to their calls by id (else the first not answered), JSON objects key by key
// and other
// text as a value; the answer after them continues that turn, the next question opens one.
TEST(Gemma4ToolCalls, ToolResultsGoInsideTheCallingTurn) {
  MockTokenizer tokenizer;
  ChatFormatter formatter = GemmaFormatter(tokenizer);
  Result<std::string> rendered = formatter.Render(Request(R"({"messages":[
    {"role":"user","content":"Weather and time?"},
    {"role":"assistant","content":"Checking.","tool_calls":[
      {"id":"a","type":"function","function":{"name":"weather","arguments":{"city":"Oslo"}}},
      {"id":"b","type":"function","function":{"name":"clock","arguments":{}}}]},
    {"role":"tool","tool_call_id":"b","content":"{\"time\":\"9:00\",\"tz\":null}"},
    {"role":"tool","content":"rain, 4 \"C\""},
    {"role":"assistant","content":"Rainy at nine."},
    {"role":"user","content":"Thanks"}]})"));
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_EQ(*rendered,
            "<|turn>user\nWeather and time?<turn|>\n"
            "<|turn>model\n<|tool_call>call:weather{city:<|\"|>Oslo<|\"|>}<tool_call|>"
            "<|tool_call>call:clock{}<tool_call|>"
            "<|tool_response>response:clock{time:<|\"|>9:00<|\"|>,tz:None}<tool_response|>"
            "<|tool_response>response:weather{value:<|\"|>rain, 4 \"C\"<|\"|>}<tool_response|>"
            "Rainy at nine.<turn|>\n"
            "<|turn>user\nThanks<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  // Ids of any type, results of calls never made, the model's turn still open.
  rendered = formatter.Render(Request(R"({"messages":[{"role":"user","content":"Go"},
    {"role":"assistant","tool_calls":[{"id":5,"type":"function","function":{"name":"f"}}]},
    {"role":"tool","tool_call_id":"5","content":"[1,2]"},
    {"role":"tool","tool_call_id":"9","name":"g","content":"7"}]})"));
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_TRUE(rendered->ends_with(
      "<|turn>model\n<|tool_call>call:f{}<tool_call|>"
      "<|tool_response>response:f{value:[1,2]}<tool_response|>"
      "<|tool_response>response:g{value:7}<tool_response|><|channel>thought\n<channel|>"))
      << *rendered;
}

constexpr char kTools[] = R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"},"days":{"type":"integer"},
    "unit":{"type":"string","enum":["C","F"]},"Flags":{"type":"object","properties":{
      "fast":{"type":"boolean"}}}},
    "required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])";

OutputGrammar ForcedGrammar(const std::string& choice, bool in_reasoning = false,
                            const char* tools = kTools) {
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kGemma;
  context.tool_call_tags = kGemmaToolCallTags;
  context.reasoning_tags = kThoughtChannelTags;
  context.in_reasoning = in_reasoning;
  std::string param;
  Result<OutputGrammar> g = ChatOutputConstraint(
      Request(std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + tools +
              R"(,"tool_choice":)" + choice + "}"),
      context, &param);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : nullptr;
}

TEST(Gemma4ToolCalls, AForcedCallIsWrittenInThisSyntax) {
  OutputGrammar g = ForcedGrammar(R"({"type":"function","function":{"name":"get_weather"}})");
  ASSERT_NE(g, nullptr);
  const std::string full =
      Call("get_weather",
           "{city:<|\"|>São Paulo, \"SP\"\nor {Rio}<|\"|>,days:2,Flags:{fast:true},"
           "unit:<|\"|>C<|\"|>}");
  EXPECT_TRUE(Accepts(*g, full));
  EXPECT_TRUE(Accepts(*g, Call("get_weather", "{city:<|\"|><|\"|>}")));
  // city is required, keys come sorted and bare with no blanks, unit is one of its values,
  // days an integer, the JSON form is not this template's, and the named tool is the only one.
  for (const std::string& bad : {
           Call("get_weather", "{}"),
           Call("get_weather", "{days:2,city:<|\"|>x<|\"|>}"),
           Call("get_weather", "{city:<|\"|>x<|\"|>, days:2}"),
           Call("get_weather", "{\"city\":\"x\"}"),
           Call("get_weather", "{city:<|\"|>x<|\"|>,unit:<|\"|>K<|\"|>}"),
           Call("get_weather", "{city:<|\"|>x<|\"|>,days:two}"),
           Call("now", "{}"),
       }) {
    EXPECT_FALSE(Accepts(*g, bad)) << bad;
  }
  // A string never holds the marker or the closing tag.
  EXPECT_FALSE(AcceptsPrefix(*g, "<|tool_call>call:get_weather{city:<|\"|>a<tool_call|>"));

  // What the grammar accepts, the parser reads as the call.
  OutputDelta all = ParseAll(full, 1);
  ASSERT_EQ(all.tool_calls.size(), 1u) << all.content;
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_TRUE(SameJson(all.tool_calls[0].arguments,
                       Json::parse(R"({"city":"São Paulo, \"SP\"\nor {Rio}","days":2,
                           "unit":"C","Flags":{"fast":true}})")))
      << all.tool_calls[0].arguments;
}

TEST(Gemma4ToolCalls, RequiredIsAnyToolAfterTheThoughtChannel) {
  OutputGrammar g = ForcedGrammar(R"("required")", /*in_reasoning=*/true);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, "Time.<channel|>\n" + Call("now", "{}")));
  EXPECT_TRUE(Accepts(*g, "x<channel|>" + Call("get_weather", "{city:<|\"|>y<|\"|>}")));
  EXPECT_FALSE(Accepts(*g, Call("now", "{}")));
  EXPECT_FALSE(Accepts(*g, "x<channel|>" + Call("now", "{a:1}")));
}

// The calls the template writes, the grammar accepts: forcing writes what the model knows.
TEST(Gemma4ToolCalls, TheGrammarAcceptsWhatTheTemplateWrites) {
  MockTokenizer tokenizer;
  ChatFormatter formatter = GemmaFormatter(tokenizer);
  Json body = {{"messages", Json::parse(R"([{"role":"user","content":"go"},{"role":"assistant",
        "content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather",
        "arguments":{"unit":"F","city":"Oslo, \"NO\"","days":2,"Flags":{"fast":false}}}}]}])")},
               {"tools", Json::parse(kTools)}};
  Result<std::string> rendered = formatter.Render(Request(body.dump()));
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const size_t begin = rendered->rfind("<|tool_call>");
  const size_t end = rendered->find("<tool_call|>", begin);
  ASSERT_NE(end, std::string::npos) << *rendered;
  const std::string written = rendered->substr(begin, end + 12 - begin);
  OutputGrammar g = ForcedGrammar(R"("required")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, written)) << written;
}

// Tools this syntax cannot carry are refused by name, not forced into text the parser
// would not read.
TEST(Gemma4ToolCalls, ToolsTheSyntaxCannotCarryAreRefused) {
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kGemma;
  for (const auto& [tools, where] : std::vector<std::pair<const char*, const char*>>{
           {R"([{"type":"function","function":{"name":"a{b"}}])", "tools[0].function.parameters"},
           {R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
               "properties":{"a:b":{"type":"string"}}}}}])",
            "tools[0].function.parameters.properties.a:b"},
           {R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
               "properties":{"o":{"type":"object","properties":{"has space":{}}}}}}}])",
            "properties.o.properties.has space"},
           {R"([{"type":"function","function":{"name":"f","parameters":{"anyOf":[
               {"type":"object"}]}}}])",
            "tools[0].function.parameters"},
       }) {
    std::string param;
    Result<OutputGrammar> g = ChatOutputConstraint(
        Request(std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + tools +
                R"(,"tool_choice":"required"})"),
        context, &param);
    ASSERT_FALSE(g.ok()) << tools;
    EXPECT_EQ(param, "tools");
    EXPECT_NE(g.status().message().find(where), std::string::npos) << g.status().message();
  }
}

// Content constrained by a response_format while tools are offered never holds Gemma's
// tool-call tag, which the parser would take for a call.
TEST(Gemma4ToolCalls, AFormatsStringsAvoidTheCallTag) {
  ConstraintContext context;
  context.tool_call_syntax = ToolCallSyntax::kGemma;
  context.tool_call_tags = kGemmaToolCallTags;
  context.reasoning_tags = kThoughtChannelTags;
  std::string param;
  Result<OutputGrammar> g = ChatOutputConstraint(
      Request(std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kTools +
              R"(,"response_format":{"type":"json_object"}})"),
      context, &param);
  ASSERT_TRUE(g.ok() && *g) << g.status().message();
  EXPECT_TRUE(Accepts(**g, R"({"a": "<tool_call> is fine"})"));
  EXPECT_FALSE(AcceptsPrefix(**g, R"({"a": "<|tool_call>)"));
  EXPECT_FALSE(AcceptsPrefix(**g, R"({"a": "<|channel>thought)"));
}

}  // namespace gemma4_tool_calls_test
}  // namespace shardlm::server
