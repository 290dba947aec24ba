// Gemma's chat formats on the server side: Gemma 3's template gives plain content (no
// reasoning tags, no tool calls); a template that writes Gemma 4's thought channel
// (<|channel>thought…<channel|>) sends that channel to the reasoning, whole and byte by
// byte, and a prompt that leaves it open or closed is told apart. The renders of the
// fixture Gemma 3 template are checked against transformers in tests/chat.
#include <gtest/gtest.h>

#include "grammar/grammar_test_util.h"
#include "server/chat_format.h"
#include "server/mock_engine.h"
#include "server/output_constraint.h"
#include "support/fixtures.h"

namespace shardlm::server {
namespace gemma_chat_test {

using grammar::testing::Accepts;
using grammar::testing::AcceptsPrefix;

OutputDelta ParseAll(const std::string& text, size_t step, ReasoningTags tags,
                     bool in_reasoning = false) {
  OutputParser parser(in_reasoning, /*parse_tools=*/true, "call_", tags);
  OutputDelta all;
  auto add = [&](OutputDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (ToolCall& call : d.tool_calls) all.tool_calls.push_back(std::move(call));
  };
  for (size_t i = 0; i < text.size(); i += step) add(parser.Push(text.substr(i, step)));
  add(parser.Finish());
  return all;
}

ChatCompletionRequest Request(const std::string& body) {
  Result<ChatCompletionRequest> r = ChatCompletionRequestFromJSON(Json::parse(body));
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : ChatCompletionRequest{};
}

TEST(GemmaChat, Gemma3OutputIsPlainContent) {
  SHARDLM_REQUIRE_FIXTURES();
  MockTokenizer tokenizer;
  Result<ChatFormatter> formatter = ChatFormatter::Create(
      testing::ReadTextFile(testing::FixturePath("templates/google-gemma-3-it.jinja")), tokenizer);
  ASSERT_TRUE(formatter.ok()) << formatter.status().message();
  EXPECT_EQ(formatter->reasoning_tags().open, "<think>");
  EXPECT_FALSE(formatter->writes_tool_calls());
  Result<ChatPrompt> prompt =
      formatter->Tokenize(Request(R"({"messages":[{"role":"system","content":"Be brief."},
          {"role":"user","content":"hi"}]})"),
                          tokenizer);
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_FALSE(prompt->opens_reasoning);
  const std::string answer = "Hello! <b>Bold</b> and a <channel|> mark are text.\n";
  OutputDelta all = ParseAll(answer, 1, formatter->reasoning_tags());
  EXPECT_EQ(all.content, answer);
  EXPECT_EQ(all.reasoning, "");
  EXPECT_TRUE(all.tool_calls.empty());
}

// The shape of Gemma 4's generation prompt: a model turn, and an empty, closed thought
// channel when thinking is off. (Written for this test; the real template also lays out
// tools, tool calls and media.)
constexpr char kChannelTemplate[] =
    "{{ bos_token }}{%- for m in messages -%}"
    "<|turn>{{ 'model' if m.role == 'assistant' else m.role }}\n{{ m.content }}<turn|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|turn>model\n"
    "{%- if open_channel is defined %}<|channel>thought\n"
    "{%- elif not enable_thinking | default(false) %}<|channel>thought\n<channel|>{% endif -%}"
    "{%- endif -%}";

TEST(GemmaChat, TheTemplatesChannelTagsPickTheReasoningTags) {
  MockTokenizer tokenizer;
  Result<ChatFormatter> formatter = ChatFormatter::Create(kChannelTemplate, tokenizer);
  ASSERT_TRUE(formatter.ok()) << formatter.status().message();
  EXPECT_EQ(formatter->reasoning_tags().open, "<|channel>thought");
  EXPECT_EQ(formatter->reasoning_tags().close, "<channel|>");
  EXPECT_FALSE(formatter->writes_tool_calls());

  const std::string question = R"({"messages":[{"role":"user","content":"hi"}])";
  for (const auto& [kwargs, opens] : std::vector<std::pair<std::string, bool>>{
           {"", false},                                                     // thinking off
           {R"(,"chat_template_kwargs":{"enable_thinking":true})", false},  // the model opens it
           {R"(,"chat_template_kwargs":{"open_channel":true})", true}}) {
    Result<ChatPrompt> prompt = formatter->Tokenize(Request(question + kwargs + "}"), tokenizer);
    ASSERT_TRUE(prompt.ok()) << prompt.status().message();
    EXPECT_EQ(prompt->opens_reasoning, opens) << kwargs;
  }
}

TEST(GemmaChat, TheThoughtChannelIsReasoning) {
  const std::string text =
      "<|channel>thought\nWater is H2O.\n<channel|>The formula is H<sub>2</sub>O. <think>x";
  for (size_t step : {size_t{1}, size_t{3}, text.size()}) {
    SCOPED_TRACE(step);
    OutputDelta all = ParseAll(text, step, kThoughtChannelTags);
    EXPECT_EQ(all.reasoning, "Water is H2O.\n");
    EXPECT_EQ(all.content, "The formula is H<sub>2</sub>O. <think>x");
  }
  // A prompt that opened the channel: the model goes on inside it.
  OutputDelta all = ParseAll("Plan.<channel|>Done.", 1, kThoughtChannelTags,
                             /*in_reasoning=*/true);
  EXPECT_EQ(all.reasoning, "Plan.");
  EXPECT_EQ(all.content, "Done.");
  // No delta ends inside a tag.
  OutputParser parser(false, false, "c", kThoughtChannelTags);
  EXPECT_EQ(parser.Push("Hi <|chan").content, "Hi ");
  OutputDelta d = parser.Push("nel>thought\nhm<chan");
  EXPECT_EQ(d.reasoning, "hm");
  EXPECT_EQ(parser.Push("nel|>ok").content, "ok");
}

// A constrained answer after an open thought channel: free text up to <channel|>.
TEST(GemmaChat, AConstraintWaitsForTheChannelToClose) {
  ConstraintContext context;
  context.in_reasoning = true;
  context.reasoning_tags = kThoughtChannelTags;
  std::string param;
  Result<OutputGrammar> g =
      ChatOutputConstraint(Request(R"({"messages":[{"role":"user","content":"hi"}],
          "response_format":{"type":"json_object"}})"),
                           context, &param);
  ASSERT_TRUE(g.ok() && *g) << g.status().message();
  EXPECT_TRUE(Accepts(**g, "think </think> more<channel|>\n{\"a\": 1}"));
  EXPECT_FALSE(Accepts(**g, "{\"a\": 1}"));
  EXPECT_FALSE(AcceptsPrefix(**g, "x<channel|>{\"a\": \"<|channel>thought"));
}

}  // namespace gemma_chat_test
}  // namespace shardlm::server
