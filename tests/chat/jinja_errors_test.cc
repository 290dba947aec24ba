// Jinja engine error reporting and resource bounds: syntax errors carry line numbers,
// runtime errors name the statement's line, raise_exception keeps the template's message,
// and hostile templates (deep nesting, recursion, runaway loops, huge strings) fail cleanly.
#include <gtest/gtest.h>

#include <string>

#include "chat/jinja_template.h"

namespace shardlm::jinja {
namespace {

Status ParseError(const std::string& source) {
  auto tmpl = Template::Parse(source);
  return tmpl.ok() ? Status::Ok() : tmpl.status();
}

Result<std::string> Render(const std::string& source, const RenderLimits& limits = {},
                           bool* raised = nullptr) {
  SHARDLM_ASSIGN_OR_RETURN(Template tmpl, Template::Parse(source));
  return tmpl.Render({}, limits, raised);
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  Status st = ParseError("ok\n{% if x %}\nbody");
  EXPECT_EQ(st.code(), StatusCode::kInvalidData);
  EXPECT_NE(st.message().find("endif"), std::string::npos) << st.message();

  st = ParseError("a\nb\n{{ 1 + }}");
  EXPECT_NE(st.message().find("line 3"), std::string::npos) << st.message();

  st = ParseError("{% for x in xs %}\n{% endif %}");
  EXPECT_NE(st.message().find("line 2"), std::string::npos) << st.message();

  st = ParseError("x\n{{ 'unterminated }}");
  EXPECT_NE(st.message().find("line 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("unterminated string"), std::string::npos) << st.message();

  EXPECT_FALSE(ParseError("{# never closed").ok());
  EXPECT_FALSE(ParseError("{% break %}").ok());
  EXPECT_FALSE(ParseError("{{ x | no_such_filter }}").ok());
  EXPECT_FALSE(ParseError("{{ x is no_such_test }}").ok());
  EXPECT_FALSE(ParseError("{% extends 'base.html' %}").ok());
  EXPECT_FALSE(ParseError("{{ }}").ok());
  EXPECT_FALSE(ParseError("{{ 99999999999999999999 }}").ok());
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  auto got = Render("line one\n{% set x = none %}\n{{ x.y.z }}");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("line 3"), std::string::npos) << got.status().message();

  got = Render("{{ 'a' + none }}");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("can only concatenate str"), std::string::npos);
}

TEST(JinjaErrors, RaiseExceptionKeepsTheTemplatesMessage) {
  bool raised = false;
  auto got = Render("text\n{% if true %}{{ raise_exception('Roles must alternate!') }}{% endif %}",
                    {}, &raised);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(raised);
  EXPECT_EQ(got.status().message(), "Roles must alternate!");
}

TEST(JinjaLimits, DeepNestingIsASyntaxError) {
  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_FALSE(ParseError(parens).ok());
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(ParseError(ifs).ok());
  std::string nots = "{{ " + std::string(50000, ' ') + "}}";
  for (int i = 0; i < 20000; ++i) nots.insert(3, "not ");
  EXPECT_FALSE(ParseError(nots).ok());
}

TEST(JinjaLimits, RecursionIsBounded) {
  auto got = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("recursion"), std::string::npos) << got.status().message();
}

TEST(JinjaLimits, RunawayLoopsStopAtTheStepBudget) {
  RenderLimits limits;
  limits.max_steps = 500'000;
  auto got = Render(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ loop.index }}{% endfor %}"
      "{% endfor %}",
      limits);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("budget"), std::string::npos) << got.status().message();
  EXPECT_FALSE(Render("{{ range(10000000) }}").ok());
}

TEST(JinjaLimits, OutputSizeIsBounded) {
  EXPECT_FALSE(Render("{{ 'x' * 1000000000000 }}").ok());
  EXPECT_FALSE(Render("{{ ['x'] * 1000000000000 }}").ok());
  auto got = Render(
      "{% set ns = namespace(s='0123456789') %}{% for i in range(64) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}");
  EXPECT_FALSE(got.ok());
  RenderLimits small;
  small.max_output_bytes = 1000;
  EXPECT_FALSE(Render("{% for i in range(2000) %}x{% endfor %}", small).ok());
  EXPECT_TRUE(Render("{% for i in range(999) %}x{% endfor %}", small).ok());
}

// Values a template builds nest at most Value::kMaxNesting deep, so printing, comparing,
// serializing and destroying them cannot exhaust the stack; a namespace may not hold one,
// so no chain of namespaces can grow a structure past the bound after it was built.
TEST(JinjaLimits, BuiltValuesNestBoundedly) {
  auto got = Render(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("nest deeper than 512"), std::string::npos)
      << got.status().message();
  got = Render(
      "{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}"
      "{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(got.ok());
  got = Render(
      "{% set st = namespace(cur=namespace()) %}{% for i in range(100000) %}"
      "{% set m = namespace() %}{% set c = st.cur %}{% set c.x = [m] %}{% set st.cur = m %}"
      "{% endfor %}done");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("cannot hold another namespace"), std::string::npos)
      << got.status().message();
  EXPECT_FALSE(Render("{% set a = namespace() %}{% set b = namespace(x=[a]) %}").ok());
  // What real templates do with namespaces still works.
  got = Render(
      "{% set ns = namespace(items=[], flag=false) %}{% for i in range(3) %}"
      "{% set ns.items = ns.items + [{'i': i}] %}{% set ns.flag = true %}{% endfor %}"
      "{{ ns.items|length }} {{ ns.flag }} {{ ns.items|tojson }}");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, "3 True [{\"i\": 0}, {\"i\": 1}, {\"i\": 2}]");
}

TEST(JinjaLimits, ToJsonOutputIsBounded) {
  RenderLimits small;
  small.max_output_bytes = 10000;
  // A huge indent or separator multiplies a value's size: stopped as it is written.
  auto got = Render("{% set xs = range(1000)|list %}{{ xs|tojson(separators=['" +
                        std::string(200, ',') + "', ':']) }}",
                    small);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("tojson"), std::string::npos) << got.status().message();
  EXPECT_TRUE(Render("{{ range(100)|list|tojson }}", small).ok());
}

TEST(JinjaLimits, TemplatesAreReusableAndIndependent) {
  auto tmpl = Template::Parse("{% set ns = namespace(n=0) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}");
  ASSERT_TRUE(tmpl.ok());
  for (int i = 0; i < 3; ++i) {
    auto got = tmpl->Render({});
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, "1");
  }
}

}  // namespace
}  // namespace shardlm::jinja
