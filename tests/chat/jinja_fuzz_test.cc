// Fuzz test: random truncations and mutations of the real chat templates must parse or
// fail, and render or fail, never crash or hang (bounded depth, steps and output).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "support/fixtures.h"
#include "support/sanitizer.h"

namespace shardlm {
namespace {

// Fragments that make mutations syntactically interesting (tags, operators, keywords).
const char* const kSnippets[] = {
    "{%",
    "%}",
    "{{",
    "}}",
    "{#",
    "#}",
    "-%}",
    "{%-",
    "{% endfor %}",
    "{% endif %}",
    "{% for x in messages %}",
    "{% if x %}",
    "{% else %}",
    "{% macro m(a) %}",
    "{% endmacro %}",
    "{{ m(1) }}",
    "(",
    ")",
    "[",
    "]",
    "'",
    "\"",
    "|",
    "| tojson",
    "is defined",
    " not ",
    " in ",
    "loop.",
    "ns.",
    "[::-1]",
    "**",
    "~",
    "{% set ns.x = 1 %}",
    "{% break %}",
    "caller()",
    "{% call m() %}",
    "{% endcall %}",
    "\\",
    "\n",
    "range(99999)",
    "* 99999",
    "{% raw %}",
};

std::string Mutate(std::string s, std::mt19937& rng) {
  auto pick = [&](size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
  };
  int rounds = 1 + static_cast<int>(pick(3));
  for (int r = 0; r < rounds; ++r) {
    size_t pos = pick(s.size() + 1);
    switch (pick(5)) {
      case 0:
        s.resize(pos);
        break;
      case 1:
        s.erase(pos, 1 + pick(20));
        break;
      case 2:
        s.insert(pos, kSnippets[pick(std::size(kSnippets))]);
        break;
      case 3: {
        size_t from = pick(s.size() + 1);
        s.insert(pos, s.substr(from, 1 + pick(200)));
        break;
      }
      default:
        if (!s.empty()) s[pick(s.size())] = "{}%#-+()[]'\".|~ \nx"[pick(18)];
    }
  }
  return s;
}

TEST(JinjaFuzz, MutatedTemplatesNeverCrash) {
  SHARDLM_REQUIRE_FIXTURES();
  std::string dir = testing::FixturePath("templates");
  auto manifest = nlohmann::ordered_json::parse(testing::ReadTextFile(dir + "/templates.json"));
  auto convs = nlohmann::ordered_json::parse(testing::ReadTextFile(dir + "/conversations.json"));
  std::vector<std::string> sources = {ChatTemplate::ChatMlSource()};
  for (const auto& t : manifest["templates"]) {
    sources.push_back(testing::ReadTextFile(dir + "/" + t["file"].get<std::string>()));
  }
  const auto& conversations = convs["conversations"];

  ChatTemplateOptions options;
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = 1 << 20;
  std::mt19937 rng(20261122);
  int parsed = 0;
  int rendered = 0;
  constexpr int kIterations = shardlm::testing::CasesUnlessSanitized(20000);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) {
    std::string source = Mutate(sources[i % sources.size()], rng);
    auto tmpl = ChatTemplate::Create(source, "<s>", "</s>", options);
    if (!tmpl.ok()) {
      EXPECT_FALSE(tmpl.status().message().empty());
      continue;
    }
    ++parsed;
    const auto& conv = conversations[i % conversations.size()];
    nlohmann::ordered_json tools =
        conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json();
    auto got = tmpl->Render(conv["messages"], tools, i % 2 == 0);
    if (got.ok()) {
      ++rendered;
    } else {
      EXPECT_FALSE(got.status().message().empty());
    }
  }
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz: %d mutations, %d parsed, %d rendered, %.1f s\n", kIterations, parsed, rendered,
              seconds);
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rendered, 0);
  EXPECT_LT(parsed, kIterations);
}

}  // namespace
}  // namespace shardlm
