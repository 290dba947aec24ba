// Jinja engine unit tests: whitespace control, undefined semantics, loops, tojson, macros,
// namespaces, slicing, tests/filters/methods, and error reporting.
//
// The expected strings of kCases were produced by Python's jinja2 configured as
// transformers does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, json.dumps tojson) on these inputs, so they pin jinja2's behaviour.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "chat/jinja_template.h"

namespace shardlm::jinja {
namespace {

enum Expect { kOk, kRaised, kError };

struct Case {
  const char* group;
  const char* source;
  const char* context;  // JSON object of variables
  Expect expect;
  const char* want;  // output (kOk) or the raise_exception message (kRaised)
};

// clang-format off
const Case kCases[] = {
    {"Whitespace", "a\n  {% if true %}\n  x\n  {% endif %}\nb\n",
     "{}",
     kOk, "a\n  x\nb"},
    {"Whitespace", "a  {%- if true -%}  x  {%- endif -%}  b",
     "{}",
     kOk, "axb"},
    {"Whitespace", "{{ 1 }}\n{{ 2 }}\n",
     "{}",
     kOk, "1\n2"},
    {"Whitespace", "  {{- 'x' -}}  \n",
     "{}",
     kOk, "x"},
    {"Whitespace", "x {% if true %}y{% endif %} z\n  {# c #}\nw",
     "{}",
     kOk, "x y z\nw"},
    {"Whitespace", "  {%+ if true %}a{% endif %}",
     "{}",
     kOk, "  a"},
    {"Whitespace", "{% raw %}{{ x }}{%- endraw %}",
     "{}",
     kOk, "{{ x }}"},
    {"Whitespace", "line1\r\nline2\r\n",
     "{}",
     kOk, "line1\nline2"},
    {"Whitespace", "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n",
     "{}",
     kOk, "  1\n  2\n"},
    {"Whitespace", "{#- comment -#}   hi",
     "{}",
     kOk, "hi"},
    {"Whitespace", "keep\n\n",
     "{}",
     kOk, "keep\n"},
    {"Whitespace", "{% if true %}  \n{% endif %}",
     "{}",
     kOk, "  \n"},
    {"Whitespace", "\t{% if true %}\tx{% endif %}",
     "{}",
     kOk, "\tx"},
    {"Undefined", "[{{ x }}][{{ x|length }}][{{ x is defined }}][{{ x == none }}][{% for a in x %}n{% endfor %}][{{ x|default('d') }}]",
     "{}",
     kOk, "[][0][False][False][][d]"},
    {"Undefined", "{{ d.missing }}|{{ d.missing is defined }}|{{ d['missing'] is defined }}",
     "{\"d\": {\"a\": 1}}",
     kOk, "|False|False"},
    {"Undefined", "{{ 'a' in x }}{{ x is iterable }}{{ x is sequence }}{{ x is mapping }}{{ x is string }}",
     "{}",
     kOk, "FalseTrueTrueFalseFalse"},
    {"Undefined", "{{ none.x is defined }}{{ s.content is defined }}",
     "{\"s\": \"str\"}",
     kOk, "FalseFalse"},
    {"Undefined", "{% if not x %}no{% endif %}{{ x|trim }}|{{ x|string }}|{{ x|list }}|{{ x|items|list }}",
     "{}",
     kOk, "no||[]|[]"},
    {"Undefined", "{{ x.y }}",
     "{}",
     kError, ""},
    {"Undefined", "{{ x['y'] }}",
     "{}",
     kError, ""},
    {"Undefined", "{{ x() }}",
     "{}",
     kError, ""},
    {"Undefined", "{{ x + 1 }}",
     "{}",
     kError, ""},
    {"Undefined", "{{ x|tojson }}",
     "{}",
     kError, ""},
    {"Undefined", "{{ m.content.startswith('x') }}",
     "{\"m\": {\"content\": null}}",
     kError, ""},
    {"Loop", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}",
     "{}",
     kOk, "1032TrueFalse3[|b]2121FalseFalse3[a|c]3210FalseTrue3[b|]"},
    {"Loop", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": [1, 2]}}",
     kOk, "b=1;a=[1, 2];"},
    {"Loop", "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.last }} {% else %}empty{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     kOk, "21False 32True "},
    {"Loop", "{% for x in [] %}a{% else %}empty{% endfor %}",
     "{}",
     kOk, "empty"},
    {"Loop", "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{\"xs\": [1, 2, 3, 4, 5]}",
     kOk, "13"},
    {"Loop", "{% set y = 1 %}{% for x in [1] %}{% set y = 2 %}{% endfor %}{{ y }}",
     "{}",
     kOk, "1"},
    {"Loop", "{% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{% endfor %}",
     "{}",
     kOk, "aba"},
    {"Loop", "{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}",
     "{}",
     kOk, "1122113242"},
    {"Loop", "{% for x in d %}{{ x }}{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2}}",
     kOk, "za"},
    {"Loop", "{% for x in 5 %}{% endfor %}",
     "{}",
     kError, ""},
    {"ToJson", "{{ d|tojson }}",
     "{\"d\": {\"b\": 1, \"a\": \"\303\251<>&'\\\"\\\\\\n\\u0001\", \"c\": [1.0, 2.5, null, true, {}], \"e\": []}}",
     kOk, "{\"b\": 1, \"a\": \"\303\251<>&'\\\"\\\\\\n\\u0001\", \"c\": [1.0, 2.5, null, true, {}], \"e\": []}"},
    {"ToJson", "{{ d|tojson(indent=4) }}",
     "{\"d\": {\"b\": 1, \"a\": {\"x\": [1, 2]}, \"c\": [], \"d\": {}}}",
     kOk, "{\n    \"b\": 1,\n    \"a\": {\n        \"x\": [\n            1,\n            2\n        ]\n    },\n    \"c\": [],\n    \"d\": {}\n}"},
    {"ToJson", "{{ d|tojson(indent=2, sort_keys=true) }}",
     "{\"d\": {\"b\": 1, \"a\": {\"x\": [1, 2]}}}",
     kOk, "{\n  \"a\": {\n    \"x\": [\n      1,\n      2\n    ]\n  },\n  \"b\": 1\n}"},
    {"ToJson", "{{ d|tojson(separators=[',', ':']) }}",
     "{\"d\": {\"b\": 1, \"a\": [1, 2]}}",
     kOk, "{\"b\":1,\"a\":[1,2]}"},
    {"ToJson", "{{ 'x'|tojson }} {{ 1e20|tojson }} {{ 0.1|tojson }} {{ 1e-7|tojson }} {{ 123456789012345678.0|tojson }} {{ 7|tojson }}",
     "{}",
     kOk, "\"x\" 1e+20 0.1 1e-07 1.2345678901234568e+17 7"},
    {"ToJson", "{{ d|tojson(ensure_ascii=true) }}",
     "{\"d\": {\"a\": \"\303\251\360\237\230\200\"}}",
     kOk, "{\"a\": \"\\u00e9\\ud83d\\ude00\"}"},
    {"Printing", "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, [\"it's\"], (1,), (1, 2)] }}",
     "{}",
     kOk, "[1, 'a', None, True, 1.5, {'k': 'v'}, [\"it's\"], (1,), (1, 2)]"},
    {"Printing", "{{ {'a': 1, 'b': [1,2]} }}{{ none }}{{ true }}{{ 1.0 }}{{ 10/4 }}{{ 10//4 }}{{ -7//2 }}{{ -7%3 }}{{ 2**10 }}{{ 2**-1 }}{{ 7/7 }}",
     "{}",
     kOk, "{'a': 1, 'b': [1, 2]}NoneTrue1.02.52-4210240.51.0"},
    {"Printing", "{{ 'a\\nb\\t\\'q\\'' }}|{{ \"x\\\\y\" }}|{{ '\\u00e9' }}|{{ 'a' 'b' }}|{{ 'a\\qb' }}",
     "{}",
     kOk, "a\nb\t'q'|x\\y|\303\251|ab|a\\qb"},
    {"Printing", "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1.5e300 }} {{ -0.0 }} {{ 3.14159 }} {{ 1_000 }} {{ 2.50 }}",
     "{}",
     kOk, "1e+16 1000000000000000.0 0.0001 1e-05 1.5e+300 -0.0 3.14159 1000 2.5"},
    {"Printing", "{{ 'abc' * 3 }}{{ [1] * 2 }}{{ 3 * 'x' }}{{ 'a' ~ 1 ~ none ~ true }}{{ [1,2] + [3] }}{{ 1 + 2.0 }}{{ true + 1 }}",
     "{}",
     kOk, "abcabcabc[1, 1]xxxa1NoneTrue[1, 2, 3]3.02"},
    {"Printing", "{{ 'a' + 1 }}",
     "{}",
     kError, ""},
    {"Printing", "{{ 'a' + none }}",
     "{}",
     kError, ""},
    {"Macro", "{% macro m(a, b='x', c=none) %}[{{ a }}{{ b }}{{ c }}{{ varargs }}{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ m(1, 2, 3, 4) }}{{ m(1, z=5) }}{{ m(b=2, a=1) }}",
     "{}",
     kOk, "[1xNone(){}][123(4,){}][1xNone(){'z': 5}][12None(){}]"},
    {"Macro", "{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}body{% endcall %}",
     "{}",
     kOk, "<body>"},
    {"Macro", "{% macro m(x) %}{{ x }}{% endmacro %}{{ m('a')|upper }}{% set y = m('q') %}{{ y|length }}",
     "{}",
     kOk, "A1"},
    {"Macro", "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n-1) }}{% endif %}{% endmacro %}{{ r(3) }}",
     "{}",
     kOk, "321"},
    {"Macro", "{% macro m(n) %}  {{ n }}\n{% endmacro %}[{{ m(1) }}]",
     "{}",
     kOk, "[  1\n]"},
    {"Macro", "{% set g = 'outer' %}{% macro m() %}{{ g }}{% set g = 'inner' %}{% endmacro %}{{ m() }}{{ g }}",
     "{}",
     kOk, "outerouter"},
    {"Namespace", "{% set ns = namespace(a=1, b='x') %}{% for i in [1,2,3] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}",
     "{}",
     kOk, "7x"},
    {"Namespace", "{% set x %}block {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}",
     "{}",
     kOk, "[block 1]UP"},
    {"Namespace", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t }}",
     "{}",
     kOk, "12(1, 2)"},
    {"Namespace", "{% set x = 1 %}{% set x.y = 2 %}",
     "{}",
     kError, ""},
    {"Namespace", "{% filter upper %}abc{{ 'd' }}{% endfilter %}{% with a = 1 %}{{ a }}{% endwith %}{{ a }}",
     "{}",
     kOk, "ABCD1"},
    {"Namespace", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}",
     "{}",
     kOk, "5"},
    {"Slicing", "{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-2:] }}{{ xs[5:] }}{{ xs[1:3] }}{{ xs[-1] }}{{ xs[10] }}",
     "{\"xs\": [1, 2, 3, 4]}",
     kOk, "[2, 3, 4][1, 2, 3][4, 3, 2, 1][1, 3][3, 4][][2, 3]4"},
    {"Slicing", "{{ s[1:] }}{{ s[::-1] }}{{ s[-1] }}{{ s[:2] }}{{ s[0] }}{{ s|length }}",
     "{\"s\": \"h\303\251llo\360\237\230\200\"}",
     kOk, "\303\251llo\360\237\230\200\360\237\230\200oll\303\251h\360\237\230\200h\303\251h6"},
    {"Slicing", "{{ xs[3:1:-1] }}{{ xs[::-2] }}{{ xs[-10:10] }}{{ x.0 }}",
     "{\"xs\": [1, 2, 3, 4, 5], \"x\": [\"p\"]}",
     kOk, "[4, 3][5, 3, 1][1, 2, 3, 4, 5]p"},
    {"Slicing", "{{ xs[::0] }}",
     "{\"xs\": [1]}",
     kError, ""},
    {"Tests", "{{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby(3) }}{{ 6 is divisibleby 4 }}{{ 'a' is eq 'a' }}{{ 'a' is equalto('b') }}{{ none is none }}{{ 1 is number }}{{ 1.0 is float }}{{ 1 is integer }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ 1 is true }}",
     "{}",
     kOk, "TrueTrueTrueFalseTrueFalseTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"Tests", "{{ range is callable }}{{ 'x' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 3 is gt 2 }}{{ 3 is lt(2) }}{{ 2 is in [1,2] }}{{ x is undefined }}{{ 1 is not none }}",
     "{}",
     kOk, "TrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrue"},
    {"Tests", "{{ not x is defined }}{{ not 1 == 2 }}{{ -2 ** 2 }}{{ 2 + 3 * 4 }}{{ 'a' + 'b' ~ 'c' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 if false }}|{{ 'y' if true else 'n' }}",
     "{}",
     kOk, "TrueTrue414abcTrueFalse|y"},
    {"Tests", "{{ 1 and 2 }}{{ 0 and 2 }}{{ 0 or 'x' }}{{ '' or none }}{{ 1 in [1] }}{{ 1 not in [1] }}{{ 'a' in {'a': 1} }}{{ 'ab' in 'cabd' }}",
     "{}",
     kOk, "20xNoneTrueFalseTrueTrue"},
    {"Tests", "{{ a == b }}{{ a != b }}{{ 1 == 1.0 }}{{ true == 1 }}{{ none == none }}{{ x == x }}{{ [1] == (1,) }}",
     "{\"a\": {\"x\": [1]}, \"b\": {\"x\": [1]}}",
     kOk, "TrueFalseTrueTrueTrueTrueFalse"},
    {"Tests", "{{ '</think>' in none }}",
     "{}",
     kError, ""},
    {"Filters", "{{ xs|length }}{{ xs|count }}{{ xs|first }}{{ xs|last }}{{ xs|join(',') }}{{ xs|join }}{{ xs|sum }}{{ xs|min }}{{ xs|max }}{{ xs|reverse|list }}{{ xs|sort }}{{ xs|sort(reverse=true) }}{{ xs|unique|list }}",
     "{\"xs\": [3, 1, 2, 3]}",
     kOk, "44333,1,2,33123913[3, 2, 1, 3][1, 2, 3, 3][3, 3, 2, 1][3, 1, 2]"},
    {"Filters", "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'aaa'|replace('a','b') }}|{{ 'aaa'|replace('a','b', 2) }}",
     "{}",
     kOk, "a b|a|Hello World|Hello|ABC|abc|bbb|bba"},
    {"Filters", "{{ x|default('d') }}{{ ''|default('d') }}{{ ''|default('d', true) }}{{ none|d('z') }}{{ 0|d(1,boolean=true) }}",
     "{}",
     kOk, "ddNone1"},
    {"Filters", "{{ '42'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}{{ '3.5'|float }}{{ 3|float }}{{ -3|abs }}{{ 2.567|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.1|round(method='ceil') }}{{ 'ff'|int(base=16) }}",
     "{}",
     kOk, "420733.53.032.572.04.03.0255"},
    {"Filters", "{{ users|map(attribute='name')|list }}{{ users|map(attribute='age', default=0)|list }}{{ ['a','b']|map('upper')|list }}",
     "{\"users\": [{\"name\": \"a\", \"age\": 3}, {\"name\": \"b\"}]}",
     kOk, "['a', 'b'][3, 0]['A', 'B']"},
    {"Filters", "{{ users|selectattr('age')|list }}{{ users|rejectattr('age')|list }}{{ users|selectattr('name', 'equalto', 'b')|list }}{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3]|reject('equalto', 2)|list }}{{ [0,1,'',none,'x']|select|list }}",
     "{\"users\": [{\"name\": \"a\", \"age\": 3}, {\"name\": \"b\"}]}",
     kOk, "[{'name': 'a', 'age': 3}][{'name': 'b'}][{'name': 'b'}][1, 3][1, 3][1, 'x']"},
    {"Filters", "{{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join }}{{ ['b','A','a','C']|sort }}{{ ['b','A','a','C']|sort(case_sensitive=true) }}{{ ['a','A','b']|unique|list }}",
     "{\"users\": [{\"name\": \"a\"}, {\"name\": \"c\"}, {\"name\": \"b\"}]}",
     kOk, "cba['A', 'a', 'b', 'C']['A', 'C', 'a', 'b']['a', 'b']"},
    {"Filters", "{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'a\nb'|indent('>') }}",
     "{}",
     kOk, "a\n    b\n\n    c|  a\n  b|a\n  \n  b|a\n>b"},
    {"Filters", "{{ 'one two, three'|wordcount }}{{ '<a&b>'|e }}{{ d|items|list }}{{ d|dictsort }}{{ d|list }}{{ d|length }}{{ 'abc'|list }}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     kOk, "3&lt;a&amp;b&gt;[('b', 1), ('a', 2)][('a', 2), ('b', 1)]['b', 'a']2['a', 'b', 'c']"},
    {"Filters", "{{ users|join(', ', attribute='name') }}{{ users|sum(attribute='n') }}{{ []|first }}{{ 'abc'|first }}{{ 'abc'|last }}{{ 'abc'|reverse }}",
     "{\"users\": [{\"name\": \"a\", \"n\": 1}, {\"name\": \"b\", \"n\": 2}]}",
     kOk, "a, b3accba"},
    {"Filters", "{% for k, v in 'abc'|items %}{% endfor %}",
     "{}",
     kError, ""},
    {"Filters", "{{ ('a' if true else 'b') | upper }}{{ 'x' | tojson | safe if true else 'y' | string }}{{ [1,2]|length - 1 }}",
     "{}",
     kOk, "A\"x\"1"},
    {"Methods", "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ ' a b '.rsplit(None, 1) }}{{ 'x'.split('x') }}",
     "{}",
     kOk, "['a', 'b', '', 'c']['a', 'b']['a', 'b,c']['a,b', 'c'][' a', 'b']['', '']"},
    {"Methods", "{{ '  ab  '.strip() }}|{{ '\n\nab\n'.lstrip('\n') }}|{{ 'ab\n\n'.rstrip('\n') }}|{{ 'xyabyx'.strip('xy') }}|{{ '\343\200\200a\302\240'.strip() }}",
     "{}",
     kOk, "ab|ab\n|ab|ab|a"},
    {"Methods", "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x','a')) }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}{{ 'aXbXc'.count('X') }}{{ ','.join(['a','b']) }}{{ 'a b'.title() }}{{ 'abc'.replace('b','x') }}{{ 'x{}y{}'.format(1,'z') }}",
     "{}",
     kOk, "TrueTrueTrueABCabc2-12a,bA Baxcx1yz"},
    {"Methods", "{{ '\303\251\360\237\230\200abc'.find('a') }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}{{ d['items'] }}",
     "{\"d\": {\"a\": 1, \"items\": 2}}",
     kOk, "21None5['a', 'items'][1, 2][('a', 1), ('items', 2)]2"},
    {"Methods", "{{ xs.index(2) }}{{ xs.count(1) }}",
     "{\"xs\": [1, 2, 1]}",
     kOk, "12"},
    {"Methods", "{{ xs.append(1) }}",
     "{\"xs\": []}",
     kError, ""},
    {"Globals", "{{ range(3)|list }}{{ range(1, 5, 2)|list }}{{ range(5, 0, -2)|list }}{% set d = dict(a=1, b=2) %}{{ d }}{{ namespace(a=1).a }}",
     "{}",
     kOk, "[0, 1, 2][1, 3][5, 3, 1]{'a': 1, 'b': 2}1"},
    {"Globals", "{{ range(1000000)|length }}",
     "{}",
     kError, ""},
    {"Globals", "{{ raise_exception('boom ' ~ 1) }}",
     "{}",
     kRaised, "boom 1"},
    {"Globals", "{{ 1 / 0 }}",
     "{}",
     kError, ""},

};
// clang-format on

Context MakeContext(const std::string& json) {
  Context context;
  nlohmann::ordered_json vars = nlohmann::ordered_json::parse(json);
  for (const auto& [k, v] : vars.items()) {
    context.emplace_back(k, Value::FromJson(v));
  }
  return context;
}

TEST(JinjaCases, MatchJinja2) {
  int index = 0;
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(c.group) + " case " + std::to_string(index++) + ": " + c.source);
    auto tmpl = Template::Parse(c.source);
    if (!tmpl.ok()) {
      EXPECT_EQ(c.expect, kError) << tmpl.status().message();
      continue;
    }
    bool raised = false;
    auto got = tmpl->Render(MakeContext(c.context), {}, &raised);
    switch (c.expect) {
      case kOk:
        ASSERT_TRUE(got.ok()) << got.status().message();
        EXPECT_EQ(*got, c.want);
        break;
      case kRaised:
        ASSERT_FALSE(got.ok());
        EXPECT_TRUE(raised);
        EXPECT_EQ(got.status().message(), c.want);
        break;
      case kError:
        EXPECT_FALSE(got.ok()) << "rendered: " << *got;
        EXPECT_FALSE(raised);
        break;
    }
  }
}

}  // namespace
}  // namespace shardlm::jinja
