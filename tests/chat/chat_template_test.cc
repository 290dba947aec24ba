// Acceptance test: every fixture template × conversation renders byte-for-byte like
// transformers + jinja2 (../shared/fixtures/templates/renders.jsonl), or fails where it did.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "support/fixtures.h"

namespace shardlm {
namespace {

using nlohmann::ordered_json;

ordered_json ReadOrderedJson(const std::string& path) {
  return ordered_json::parse(testing::ReadTextFile(path));
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 60 ? i - 60 : 0;
  std::ostringstream os;
  os << "first difference at byte " << i << " (want " << want.size() << " bytes, got " << got.size()
     << ")\n  want: ..." << Escape(want.substr(from, 120)) << "\n  got:  ..."
     << Escape(got.substr(from, 120));
  return os.str();
}

TEST(ChatTemplateFixtures, AllRendersMatch) {
  SHARDLM_REQUIRE_FIXTURES();
  std::string dir = testing::FixturePath("templates");
  ordered_json templates = ReadOrderedJson(dir + "/templates.json")["templates"];
  ordered_json conversations = ReadOrderedJson(dir + "/conversations.json")["conversations"];
  std::ifstream lines(dir + "/renders.jsonl");
  std::string line;
  int checked = 0;
  ChatTemplateOptions options;
  options.clock = testing::FixtureClock;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ordered_json want = ordered_json::parse(line);
    std::string file = want["template"];
    std::string conv_id = want["conversation"];
    SCOPED_TRACE(file + " × " + conv_id);
    auto tpl_it = std::find_if(templates.begin(), templates.end(),
                               [&](const ordered_json& t) { return t["file"] == file; });
    auto conv_it = std::find_if(conversations.begin(), conversations.end(),
                                [&](const ordered_json& c) { return c["id"] == conv_id; });
    ASSERT_NE(tpl_it, templates.end());
    ASSERT_NE(conv_it, conversations.end());
    auto tmpl = ChatTemplate::Create(testing::ReadTextFile(dir + "/" + file),
                                     testing::OptionalToken((*tpl_it)["bos_token"]),
                                     testing::OptionalToken((*tpl_it)["eos_token"]), options);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
    ordered_json tools = conv_it->contains("tools") ? (*conv_it)["tools"] : ordered_json();
    bool raised = false;
    auto got = tmpl->Render((*conv_it)["messages"], tools,
                            want["add_generation_prompt"].get<bool>(), &raised);
    ++checked;
    if (want.contains("error")) {
      EXPECT_FALSE(got.ok()) << "expected error: " << want["error"];
      if (!got.ok() && want["error_type"] == "TemplateError") {
        EXPECT_TRUE(raised);
        EXPECT_EQ(got.status().message(), want["error"].get<std::string>());
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().message();
    std::string expected = want["rendered"];
    EXPECT_EQ(*got, expected) << Diff(expected, *got);
  }
  EXPECT_EQ(checked, 60);
}

TEST(ChatTemplate, BuiltinChatMl) {
  auto tmpl = ChatTemplate::ChatMl();
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  ordered_json messages = ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  auto got = tmpl->Render(messages, ordered_json(), true);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, PassesTheVariablesTransformersPasses) {
  auto tmpl = ChatTemplate::Create(
      "{{ bos_token is defined }}|{{ eos_token }}|{{ tools }}|{{ documents }}|"
      "{{ add_generation_prompt }}|{{ messages|length }}|{{ strftime_now('%Y-%m-%d %a %b') }}",
      std::nullopt, "</s>", ChatTemplateOptions{testing::FixtureClock, {}});
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  auto got = tmpl->Render(ordered_json::array(), ordered_json(), false);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "False|</s>|None|None|False|0|2026-11-22 Sun Nov");
}

TEST(ChatTemplate, ExtraVariablesReachTheTemplate) {
  SHARDLM_REQUIRE_FIXTURES();
  std::string dir = testing::FixturePath("templates");
  auto tmpl = ChatTemplate::Create(testing::ReadTextFile(dir + "/Qwen-Qwen3-0.6B.jinja"),
                                   std::nullopt, "<|im_end|>");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  ordered_json messages = ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  auto got = tmpl->RenderWith(messages, ordered_json(), true,
                              ordered_json::parse(R"({"enable_thinking": false})"));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(tmpl->RenderWith(messages, ordered_json(), true, ordered_json::array()).ok());
}

TEST(ChatTemplate, PlainJsonOverloadAndErrors) {
  auto tmpl = ChatTemplate::ChatMl();
  ASSERT_TRUE(tmpl.ok());
  auto got = tmpl->Render(nlohmann::json::parse(R"([{"role":"user","content":"x"}])"),
                          nlohmann::json(), false);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "<|im_start|>user\nx<|im_end|>\n");
  // content null: ChatML concatenates str + None, a runtime error, not a crash.
  bool raised = true;
  got = tmpl->Render(ordered_json::parse(R"([{"role":"user","content":null}])"), ordered_json(),
                     true, &raised);
  EXPECT_FALSE(got.ok());
  EXPECT_FALSE(raised);
  auto bad = ChatTemplate::Create("{% for %}", std::nullopt, std::nullopt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos);
}

}  // namespace
}  // namespace shardlm

namespace shardlm {
namespace {

// What a caller hands a template is bounded while it is converted: nesting past
// Value::kMaxFromJsonDepth or more values than RenderLimits::max_input_values is an
// InvalidArgument, never a deep recursion or gigabytes of values.
TEST(ChatTemplateLimits, MessagesAreBoundedWhileConverted) {
  auto tmpl = ChatTemplate::ChatMl();
  ASSERT_TRUE(tmpl.ok());
  nlohmann::ordered_json deep = "leaf";
  for (int i = 0; i < 200000; ++i) deep = nlohmann::ordered_json::array({std::move(deep)});
  // Built in place: copying a value this deep would itself recurse 200000 times.
  nlohmann::ordered_json message = {{"role", "user"}, {"content", "hi"}};
  message["extra"] = std::move(deep);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back(std::move(message));
  Result<std::string> r = tmpl->Render(messages, nullptr, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deeper than 128"), std::string::npos)
      << r.status().message();

  nlohmann::ordered_json many = nlohmann::ordered_json::array();
  for (int i = 0; i < 300000; ++i) many.push_back(i);
  messages = {{{"role", "user"}, {"content", "hi"}, {"extra", many}}};
  r = tmpl->Render(messages, nullptr, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than a template may take"), std::string::npos)
      << r.status().message();

  messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_TRUE(tmpl->Render(messages, nullptr, true).ok());
}

}  // namespace
}  // namespace shardlm
