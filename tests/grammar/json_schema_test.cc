// JSON Schema → grammar: for each keyword of the subset, texts that must be accepted and
// texts that must not; the bounds of the output (whitespace, numbers, depth, UTF-8); the
// refusals, which name the keyword and where it is.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/grammar_test_util.h"

namespace shardlm::grammar {
namespace {

using testing::Accepts;
using testing::AcceptsPrefix;
using testing::ExpectSentences;

Grammar Compile(const char* schema, JsonGrammarOptions options = {}) {
  Result<Grammar> g = JsonSchemaGrammar(Json::parse(schema), options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : JsonObjectGrammar().value();
}

std::string RefusalOf(const char* schema) {
  Result<Grammar> g = JsonSchemaGrammar(Json::parse(schema));
  return g.ok() ? "(compiled)" : g.status().message();
}

TEST(JsonSchema, ScalarTypes) {
  const Grammar s = Compile(R"({"type":"string"})");
  EXPECT_TRUE(Accepts(s, R"("")"));
  EXPECT_TRUE(Accepts(s, R"("a b \" \\ \/ \n \u00e9 é 中 😀")"));
  EXPECT_FALSE(Accepts(s, R"("a)"));
  EXPECT_FALSE(Accepts(s, "\"a\nb\""));  // raw control characters are not JSON
  EXPECT_FALSE(Accepts(s, R"("\x")"));
  EXPECT_FALSE(Accepts(s, "\"\xff\""));          // not UTF-8
  EXPECT_FALSE(Accepts(s, "\"\xc0\x80\""));      // overlong
  EXPECT_FALSE(Accepts(s, "\"\xed\xa0\x80\""));  // a surrogate's UTF-8
  EXPECT_FALSE(Accepts(s, R"("\ud83d")"));       // a lone surrogate escape
  EXPECT_FALSE(Accepts(s, "123"));

  ExpectSentences(Compile(R"({"type":"integer"})"), {"0", "-0", "7", "-42", "123456789012345678"},
                  {"01", "1.5", "1e3", "+1", "-", "1234567890123456789", "\"1\""});
  ExpectSentences(Compile(R"({"type":"number"})"),
                  {"0", "-1.5", "3.25e10", "1E-5", "2e+99", "0.0000000000000001"},
                  {"1.", ".5", "1e", "1e999", "0.12345678901234567", "NaN", "--1"});

  const Grammar b = Compile(R"({"type":"boolean"})");
  EXPECT_TRUE(Accepts(b, "true"));
  EXPECT_TRUE(Accepts(b, "false"));
  EXPECT_FALSE(Accepts(b, "True"));
  EXPECT_TRUE(Accepts(Compile(R"({"type":"null"})"), "null"));
  EXPECT_FALSE(Accepts(Compile(R"({"type":"null"})"), "nil"));
}

TEST(JsonSchema, TypeListsAndAnyOf) {
  const Grammar g = Compile(R"({"type":["string","null"]})");
  EXPECT_TRUE(Accepts(g, "null"));
  EXPECT_TRUE(Accepts(g, R"("x")"));
  EXPECT_FALSE(Accepts(g, "1"));

  const Grammar any = Compile(R"({"anyOf":[{"type":"integer"},{"type":"object",
      "properties":{"a":{"type":"boolean"}},"required":["a"]}]})");
  EXPECT_TRUE(Accepts(any, "12"));
  EXPECT_TRUE(Accepts(any, R"({"a":true})"));
  EXPECT_FALSE(Accepts(any, R"({"a":1})"));
  EXPECT_FALSE(Accepts(any, R"("12")"));
}

TEST(JsonSchema, PropertiesComeInSchemaOrderAndRequiredOnesCannotBeSkipped) {
  const Grammar g = Compile(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array",
      "items":{"type":"string"}}},"required":["name","tags"],"additionalProperties":false})");
  EXPECT_TRUE(Accepts(g, R"({"name":"a","age":3,"tags":[]})"));
  EXPECT_TRUE(Accepts(g, R"({"name":"a","tags":["x","y"]})"));  // age is optional
  EXPECT_TRUE(Accepts(g, "{\n  \"name\": \"a\",\n  \"tags\": [ \"x\" ]\n}"));
  EXPECT_FALSE(Accepts(g, R"({"age":3,"name":"a","tags":[]})"));  // out of order
  EXPECT_FALSE(Accepts(g, R"({"name":"a"})"));                    // tags is required
  EXPECT_FALSE(Accepts(g, R"({"name":"a","tags":[],"x":1})"));    // no extra properties
  EXPECT_FALSE(Accepts(g, R"({"name":"a",,"tags":[]})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"a","tags":[],})"));
  EXPECT_FALSE(AcceptsPrefix(g, R"({"nam":)"));
}

TEST(JsonSchema, AllOptionalPropertiesAllowTheEmptyObject) {
  const Grammar g = Compile(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"integer"}}})");
  EXPECT_TRUE(Accepts(g, "{}"));
  EXPECT_TRUE(Accepts(g, R"({"b":2})"));
  EXPECT_TRUE(Accepts(g, R"({"a":1, "b":2})"));
  EXPECT_FALSE(Accepts(g, R"({,"b":2})"));
  EXPECT_FALSE(Accepts(g, R"({"b":2,"a":1})"));
}

TEST(JsonSchema, ObjectsWithoutProperties) {
  const Grammar any = Compile(R"({"type":"object"})");
  EXPECT_TRUE(Accepts(any, R"({"x":[1,{"y":null}],"z":"w"})"));
  EXPECT_TRUE(Accepts(any, "{}"));
  EXPECT_FALSE(Accepts(any, "[]"));
  const Grammar closed = Compile(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(Accepts(closed, "{ }"));
  EXPECT_FALSE(Accepts(closed, R"({"x":1})"));
  const Grammar map = Compile(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(Accepts(map, R"({"x":1,"y":2})"));
  EXPECT_FALSE(Accepts(map, R"({"x":"1"})"));
  // A required name that is not a property takes the additionalProperties schema.
  const Grammar req = Compile(R"({"type":"object","required":["id"],
      "additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(Accepts(req, R"({"id":5})"));
  EXPECT_FALSE(Accepts(req, "{}"));
}

TEST(JsonSchema, Arrays) {
  const Grammar g = Compile(R"({"type":"array","items":{"type":"integer"},
      "minItems":2,"maxItems":3})");
  EXPECT_FALSE(Accepts(g, "[1]"));
  EXPECT_TRUE(Accepts(g, "[1,2]"));
  EXPECT_TRUE(Accepts(g, "[ 1 , 2 , 3 ]"));
  EXPECT_FALSE(Accepts(g, "[1,2,3,4]"));
  EXPECT_FALSE(Accepts(g, "[1,\"2\"]"));
  const Grammar any = Compile(R"({"type":"array"})");
  EXPECT_TRUE(Accepts(any, "[]"));
  EXPECT_TRUE(Accepts(any, R"([1,"a",[true],{"b":null}])"));
}

TEST(JsonSchema, StringLengthsCountCharacters) {
  const Grammar g = Compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(Accepts(g, R"("a")"));
  EXPECT_TRUE(Accepts(g, R"("ab")"));
  EXPECT_TRUE(Accepts(g, R"("é中😀")"));
  EXPECT_TRUE(Accepts(g, R"("\n\u0041")"));
  EXPECT_FALSE(Accepts(g, R"("abcd")"));
}

TEST(JsonSchema, EnumAndConst) {
  const Grammar e = Compile(R"({"enum":["red","green",3,null,{"a":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"a":[1]})"}) {
    EXPECT_TRUE(Accepts(e, ok)) << ok;
  }
  EXPECT_FALSE(Accepts(e, R"("blue")"));
  EXPECT_FALSE(Accepts(e, R"("re")"));
  // With a type, values of other types are left out.
  const Grammar typed = Compile(R"({"type":"string","enum":["a",1]})");
  EXPECT_TRUE(Accepts(typed, R"("a")"));
  EXPECT_FALSE(Accepts(typed, "1"));
  const Grammar c = Compile(R"({"const":"fixed \"quoted\""})");
  EXPECT_TRUE(Accepts(c, R"("fixed \"quoted\"")"));
  EXPECT_FALSE(Accepts(c, R"("fixed")"));
}

TEST(JsonSchema, RefsToDefsAndRecursion) {
  const Grammar g = Compile(R"({"$defs":{"node":{"type":"object","properties":{
      "value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["value","children"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(Accepts(g, R"({"value":1,"children":[]})"));
  EXPECT_TRUE(Accepts(g, R"({"value":1,"children":[{"value":2,"children":[{"value":3,
      "children":[]}]},{"value":4,"children":[]}]})"));
  EXPECT_FALSE(Accepts(g, R"({"value":1,"children":[{"value":2}]})"));

  const Grammar root_ref = Compile(R"({"type":"object","properties":{"next":{"anyOf":[
      {"$ref":"#"},{"type":"null"}]}},"required":["next"]})");
  EXPECT_TRUE(Accepts(root_ref, R"({"next":{"next":{"next":null}}})"));
  const Grammar definitions = Compile(R"({"definitions":{"a":{"type":"boolean"}},
      "type":"array","items":{"$ref":"#/definitions/a"}})");
  EXPECT_TRUE(Accepts(definitions, "[true,false]"));
  EXPECT_FALSE(Accepts(definitions, "[1]"));
  // allOf with one schema, as some generators wrap a $ref.
  const Grammar wrapped = Compile(R"({"$defs":{"a":{"type":"integer"}},"type":"object",
      "properties":{"x":{"allOf":[{"$ref":"#/$defs/a"}],"description":"d"}},"required":["x"]})");
  EXPECT_TRUE(Accepts(wrapped, R"({"x":1})"));
}

TEST(JsonSchema, NestingIsBoundedAndRecursionUnrolledToTheBound) {
  JsonGrammarOptions shallow;
  shallow.max_depth = 3;
  const Grammar any = JsonObjectGrammar(shallow).value();
  EXPECT_TRUE(Accepts(any, R"({"a":{"b":{"c":1}}})"));
  EXPECT_FALSE(AcceptsPrefix(any, R"({"a":{"b":{"c":{)"));
  EXPECT_TRUE(AcceptsPrefix(any, R"({"a":[[)"));
  EXPECT_FALSE(AcceptsPrefix(any, R"({"a":[[[)"));
  // A recursion that must go on forever has no instance at all.
  EXPECT_NE(RefusalOf(R"({"type":"object","properties":{"self":{"$ref":"#"}},
      "required":["self"]})")
                .find("cannot be matched"),
            std::string::npos);
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const Grammar g = Compile(R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(Accepts(g, "[1, 2]"));
  EXPECT_TRUE(Accepts(g, "[\n" + std::string(kMaxIndent, ' ') + "1\n]"));
  EXPECT_FALSE(Accepts(g, "[\n" + std::string(kMaxIndent + 1, ' ') + "1\n]"));
  EXPECT_FALSE(Accepts(g, "[1,  2]"));
  EXPECT_FALSE(Accepts(g, " [1]"));  // nothing before or after the value
  EXPECT_FALSE(Accepts(g, "[1] "));
}

// Integer bounds that contain 0 are kept to the digits and sign within both (what zod's
// int() and nonnegative() send); every accepted value validates.
TEST(JsonSchema, IntegerBoundsAroundZero) {
  const Grammar safe =
      Compile(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})");
  EXPECT_TRUE(Accepts(safe, "-999999999999999"));
  EXPECT_TRUE(Accepts(safe, "0"));
  EXPECT_FALSE(Accepts(safe, "9999999999999999"));  // 16 digits: may pass the maximum
  const Grammar natural = Compile(R"({"type":"integer","minimum":0,"maximum":100})");
  EXPECT_TRUE(Accepts(natural, "99"));
  EXPECT_FALSE(Accepts(natural, "100"));  // 3 digits may pass 100: kept to 2
  EXPECT_FALSE(Accepts(natural, "-1"));
  const Grammar small = Compile(R"({"type":"integer","minimum":-3,"maximum":8})");
  EXPECT_TRUE(Accepts(small, "0"));
  EXPECT_FALSE(Accepts(small, "1"));
  EXPECT_FALSE(Accepts(small, "-0"));
}

TEST(JsonSchema, AnnotationsAndUnknownKeywordsAreIgnored) {
  const Grammar g = Compile(R"({"type":"string","title":"t","description":"d","default":"x",
      "examples":["y"],"format":"date-time","$comment":"c","x-vendor":{"any":1}})");
  EXPECT_TRUE(Accepts(g, R"("anything")"));
}

TEST(JsonSchema, RefusesWhatItCannotHonour) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","pattern":"^a$"})", "'pattern' at # is not supported"},
      {R"({"type":"object","properties":{"n":{"type":"number","minimum":0}}})",
       "'minimum' of a number at #/properties/n is not supported"},
      {R"({"type":"integer","minimum":1,"maximum":5})", "an integer range without 0 at #"},
      {R"({"type":"integer","maximum":-1})", "an integer range without 0 at #"},
      {R"({"type":"integer","minimum":0,"enum":[1,2]})", "'minimum' or 'maximum' beside"},
      {R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", "'oneOf' at #"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems' (only false) at #"},
      {R"({"type":"array","items":[{"type":"string"}]})", "'items' as a list of schemas at #"},
      {R"({"$ref":"https://example.com/s.json"})", "'$ref' to 'https://example.com/s.json'"},
      {R"({"$ref":"#/$defs/missing"})", "points at '#/$defs/missing'"},
      {R"({"type":"object","properties":{"a/b":{"not":{}}}})", "'not' at #/properties/a~1b"},
      {R"({"type":"strin"})", "'type' at # must name JSON types"},
      {R"({"type":"object","required":["x"],"additionalProperties":false})",
       "requires 'x', which is not in its properties"},
      {R"({"type":"string","minLength":100000})", "'minLength' above 1024"},
      {R"({"type":"integer","enum":["a"]})", "allows no value"},
      {R"({"type":"string","$ref":"#"})", "beside other constraining keywords"},
      {R"(false)", "no value is valid"},
  };
  for (const auto& [schema, expected] : cases) {
    EXPECT_NE(RefusalOf(schema).find(expected), std::string::npos)
        << schema << " → " << RefusalOf(schema);
  }
}

TEST(JsonSchema, StringsAvoidForbiddenTags) {
  JsonGrammarOptions options;
  options.forbidden_in_strings = {"</tool_call>", "<think>"};
  const Grammar g = Compile(R"({"type":"string"})", options);
  EXPECT_TRUE(Accepts(g, R"("a < b, <tool_call> and </tool_call but not the rest")"));
  EXPECT_TRUE(Accepts(g, R"("<\/tool_call> is escaped")"));
  EXPECT_FALSE(AcceptsPrefix(g, R"("x </tool_call>)"));
  EXPECT_FALSE(AcceptsPrefix(g, R"("<<think>)"));
  EXPECT_TRUE(AcceptsPrefix(g, R"("<</tool_call)"));
  // A string with a length bound leaves '<' out instead.
  const Grammar bounded = Compile(R"({"type":"string","maxLength":10})", options);
  EXPECT_TRUE(Accepts(bounded, R"("a > b")"));
  EXPECT_FALSE(AcceptsPrefix(bounded, R"("a <)"));
  // Bad tags are refused.
  options.forbidden_in_strings = {"no-angle"};
  EXPECT_FALSE(JsonSchemaGrammar(Json::parse(R"({"type":"string"})"), options).ok());
}

// The same schemas in Gemma 4's notation: bare keys in the order its templates sort them,
// strings between <|"|> markers with raw text, no blanks; enum values in that notation.
TEST(JsonSchema, GemmaNotation) {
  JsonGrammarOptions gemma;
  gemma.notation = Notation::kGemma;
  const Grammar g = Compile(R"({"type":"object","properties":{
      "b":{"type":"string"},"A":{"type":"integer"},"c":{"type":"array","items":{"type":"boolean"}},
      "d":{"enum":["x y",{"k":1,"J":null},[2.5]]},"e":{"type":"object"}},"required":["b"]})",
                            gemma);
  ExpectSentences(
      g,
      {"{b:<|\"|><|\"|>}", "{A:-7,b:<|\"|>two \"lines\"\n\\ and {braces}, [a]: <b> é<|\"|>}",
       "{A:1,b:<|\"|>x<|\"|>,c:[true,false],d:<|\"|>x y<|\"|>}", "{b:<|\"|>x<|\"|>,d:{J:null,k:1}}",
       "{b:<|\"|>x<|\"|>,d:[2.5]}", "{b:<|\"|>x<|\"|>,e:{k_1:<|\"|>v<|\"|>,n:{x:[1,null,{}]}}}"},
      {R"({"b":"x"})", "{b:\"x\"}", "{b:<|\"|>x<|\"|>,A:1}", "{A:1, b:<|\"|>x<|\"|>}",
       "{ b:<|\"|>x<|\"|>}", "{b:<|\"|>x<|\"|>,d:{k:1,J:null}}", "{b:<|\"|>x<|\"|>,e:{\"k\":1}}",
       "{A:1}"});
  // The marker ends a string: the text never holds it.
  EXPECT_FALSE(AcceptsPrefix(g, "{b:<|\"|>a<|\"|>b"));
  EXPECT_TRUE(AcceptsPrefix(g, "{b:<|\"|>a<|\"|"));
  // Other tags too, quotes and all, and bounded strings leave '<' out.
  gemma.forbidden_in_strings = {"<tool_call|>"};
  const Grammar tagged = Compile(R"({"type":"string"})", gemma);
  EXPECT_TRUE(Accepts(tagged, "<|\"|>a<tool_call| <|\"|>"));
  EXPECT_FALSE(AcceptsPrefix(tagged, "<|\"|>a<tool_call|>"));
  const Grammar bounded = Compile(R"({"type":"string","maxLength":3})", gemma);
  EXPECT_TRUE(Accepts(bounded, "<|\"|>a\"\n<|\"|>"));
  EXPECT_FALSE(Accepts(bounded, "<|\"|>abcd<|\"|>"));
  EXPECT_FALSE(AcceptsPrefix(bounded, "<|\"|>a<b"));
}

TEST(JsonSchema, TooLargeSchemasAreRefused) {
  Json schema = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 2000; ++i) {
    schema["properties"][fmt::format("p{}", i)] = {{"type", "string"}, {"maxLength", 100 + i}};
  }
  Result<Grammar> g = JsonSchemaGrammar(schema);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("too large"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace shardlm::grammar
