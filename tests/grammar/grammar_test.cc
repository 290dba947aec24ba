// GrammarBuilder and the byte automaton: repetition, pruning of rules that cannot finish,
// refusal of left recursion, the dump, fingerprints, and that repetition does not deepen
// the automaton's stacks.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include "grammar/byte_automaton.h"
#include "grammar/grammar_test_util.h"

namespace shardlm::grammar {
namespace {

using testing::Accepts;
using testing::AcceptsPrefix;
using testing::ExpectSentences;

// root ::= "a" x{min,max} "b" with separator ",".
Grammar RepeatGrammar(int min, int max) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const RuleId list = b.Repeat({b.Byte('x')}, {b.Byte(',')}, min, max);
  b.AddAlternative(root, {b.Byte('a'), GrammarBuilder::Ref(list), b.Byte('b')});
  return b.Build(root).value();
}

// Building `root` fails with a message that contains `message`.
void ExpectBuildFails(GrammarBuilder& b, RuleId root, std::string_view message) {
  Result<Grammar> g = b.Build(root);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status().message();
}

// root ::= free text up to the first `trigger`, then `rest`.
Grammar TextUntilGrammar(std::string_view trigger, std::string_view rest) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  b.AddAlternative(root, {GrammarBuilder::Ref(b.TextUntil(trigger, b.Literal(rest)))});
  return b.Build(root).value();
}

TEST(GrammarBuilder, RepeatHonoursItsBounds) {
  ExpectSentences(RepeatGrammar(0, 2), {"ab", "axb", "ax,xb"}, {"ax,x,xb", "ax,b", "axxb"});
  ExpectSentences(RepeatGrammar(2, -1), {"ax,xb", "ax,x,x,x,x,xb"}, {"ab", "axb"});
  ExpectSentences(RepeatGrammar(3, 3), {"ax,x,xb"}, {"ax,xb", "ax,x,x,xb"});
}

TEST(GrammarBuilder, DropsAlternativesThatCanNeverFinish) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const RuleId forever = b.AddRule("forever");
  b.AddAlternative(forever, {b.Byte('z'), GrammarBuilder::Ref(forever)});  // no way out
  b.AddAlternative(root, {b.Byte('a')});
  b.AddAlternative(root, {b.Byte('b'), GrammarBuilder::Ref(forever)});
  const Grammar g = b.Build(root).value();
  EXPECT_TRUE(Accepts(g, "a"));
  // "b" would start a parse that can never end: the matcher must not allow it at all.
  EXPECT_FALSE(AcceptsPrefix(g, "b"));
  EXPECT_EQ(g.n_rules(), 1) << g.ToString();
}

TEST(GrammarBuilder, RefusesARootThatCanNeverFinish) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  b.AddAlternative(root, {b.Byte('z'), GrammarBuilder::Ref(root)});
  ExpectBuildFails(b, root, "can never finish");
}

TEST(GrammarBuilder, RefusesLeftRecursionNamingTheRule) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const RuleId list = b.AddRule("list");
  const RuleId maybe = b.AddRule("maybe");
  b.AddAlternative(maybe, {});
  b.AddAlternative(maybe, {b.Byte('m')});
  // list ::= maybe list "x" | "x": left-recursive through a nullable rule.
  b.AddAlternative(list, {GrammarBuilder::Ref(maybe), GrammarBuilder::Ref(list), b.Byte('x')});
  b.AddAlternative(list, {b.Byte('x')});
  b.AddAlternative(root, {GrammarBuilder::Ref(list)});
  ExpectBuildFails(b, root, "'list' is left-recursive");
}

TEST(GrammarBuilder, RightRecursionIsFine) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  // root ::= "(" root ")" | "": balanced parentheses.
  b.AddAlternative(root, {b.Byte('('), GrammarBuilder::Ref(root), b.Byte(')')});
  b.AddAlternative(root, {});
  const Grammar g = b.Build(root).value();
  ExpectSentences(g, {"", "((()))"}, {"(()"});
  EXPECT_TRUE(AcceptsPrefix(g, "(()"));
  EXPECT_FALSE(AcceptsPrefix(g, "())"));
}

TEST(GrammarBuilder, DumpAndFingerprint) {
  const Grammar a = RepeatGrammar(0, 2);
  const Grammar same = RepeatGrammar(0, 2);
  const Grammar other = RepeatGrammar(0, 3);
  EXPECT_EQ(a.fingerprint(), same.fingerprint());
  EXPECT_TRUE(a.SameAs(same));
  EXPECT_NE(a.fingerprint(), other.fingerprint());
  EXPECT_FALSE(a.SameAs(other));
  const std::string text = a.ToString();
  EXPECT_EQ(text.substr(0, text.find('\n')), "root ::= \"a\" repeat \"b\"") << text;
}

TEST(GrammarBuilder, TextUntilTriggerThenTheRest) {
  const Grammar g = TextUntilGrammar("</think>", "{}");
  ExpectSentences(g, {"</think>{}", "any <think> text, </thin and </ <//think></think>{}"},
                  {"no trigger {}", "</think>"});
  // The first occurrence ends the free text: what follows must be the rest.
  EXPECT_FALSE(AcceptsPrefix(g, "a</think>b"));
  EXPECT_FALSE(AcceptsPrefix(g, "</think></think>"));
  // A trigger with a repeated prefix (KMP's borders).
  const Grammar g2 = TextUntilGrammar("aab", "!");
  ExpectSentences(g2, {"aaab!", "abaab!"}, {});
  EXPECT_FALSE(AcceptsPrefix(g2, "aaba"));
}

TEST(ByteAutomaton, RepetitionLoopsBetweenTheSameStates) {
  // root ::= "\"" chars "\""; chars ::= [a-z] chars | "".
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const RuleId chars = b.AddRule("chars");
  b.AddAlternative(chars, {b.Bytes(ByteSet::Range('a', 'z')), GrammarBuilder::Ref(chars)});
  b.AddAlternative(chars, {});
  b.AddAlternative(root, {b.Byte('"'), GrammarBuilder::Ref(chars), b.Byte('"')});
  ByteAutomaton automaton(std::make_shared<Grammar>(b.Build(root).value()));
  ByteAutomaton::StateId state = automaton.Next(automaton.initial(), '"');
  const ByteAutomaton::StateId inside = state;
  for (int i = 0; i < 10000; ++i) state = automaton.Next(state, uint8_t('a' + i % 26));
  EXPECT_EQ(state, inside);
  EXPECT_LE(automaton.n_states(), 4u);
  state = automaton.Next(state, '"');
  EXPECT_TRUE(automaton.IsComplete(state));
  EXPECT_EQ(automaton.Next(state, 'a'), ByteAutomaton::kDead);
}

}  // namespace
}  // namespace shardlm::grammar
