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

std::optional<std::string> OptToken(const ordered_json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<std::string>();
}

// The fixed clock of the fixtures: 2026-11-22 00:00:00.
std::tm FixtureClock() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 22;
  std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);  // fills tm_wday / tm_yday
  return tm;
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
  options.clock = FixtureClock;
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
                                     OptToken((*tpl_it)["bos_token"]),
                                     OptToken((*tpl_it)["eos_token"]), options);
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

}  // namespace
}  // namespace shardlm
