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

// root ::= "a" x{min,max} "b" with separator ",".
Grammar RepeatGrammar(int min, int max) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  const RuleId list = b.Repeat({b.Byte('x')}, {b.Byte(',')}, min, max);
  b.AddAlternative(root, {b.Byte('a'), GrammarBuilder::Ref(list), b.Byte('b')});
  return b.Build(root).value();
}

TEST(GrammarBuilder, RepeatHonoursItsBounds) {
  const Grammar zero_to_two = RepeatGrammar(0, 2);
  EXPECT_TRUE(Accepts(zero_to_two, "ab"));
  EXPECT_TRUE(Accepts(zero_to_two, "axb"));
  EXPECT_TRUE(Accepts(zero_to_two, "ax,xb"));
  EXPECT_FALSE(Accepts(zero_to_two, "ax,x,xb"));
  EXPECT_FALSE(Accepts(zero_to_two, "ax,b"));
  EXPECT_FALSE(Accepts(zero_to_two, "axxb"));

  const Grammar two_or_more = RepeatGrammar(2, -1);
  EXPECT_FALSE(Accepts(two_or_more, "ab"));
  EXPECT_FALSE(Accepts(two_or_more, "axb"));
  EXPECT_TRUE(Accepts(two_or_more, "ax,xb"));
  EXPECT_TRUE(Accepts(two_or_more, "ax,x,x,x,x,xb"));

  const Grammar exactly_three = RepeatGrammar(3, 3);
  EXPECT_FALSE(Accepts(exactly_three, "ax,xb"));
  EXPECT_TRUE(Accepts(exactly_three, "ax,x,xb"));
  EXPECT_FALSE(Accepts(exactly_three, "ax,x,x,xb"));
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
  Result<Grammar> g = b.Build(root);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("can never finish"), std::string::npos)
      << g.status().message();
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
  Result<Grammar> g = b.Build(root);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'list' is left-recursive"), std::string::npos)
      << g.status().message();
}

TEST(GrammarBuilder, RightRecursionIsFine) {
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  // root ::= "(" root ")" | "": balanced parentheses.
  b.AddAlternative(root, {b.Byte('('), GrammarBuilder::Ref(root), b.Byte(')')});
  b.AddAlternative(root, {});
  const Grammar g = b.Build(root).value();
  EXPECT_TRUE(Accepts(g, ""));
  EXPECT_TRUE(Accepts(g, "((()))"));
  EXPECT_FALSE(Accepts(g, "(()"));
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
  GrammarBuilder b;
  const RuleId root = b.AddRule("root");
  b.AddAlternative(root, {GrammarBuilder::Ref(b.TextUntil("</think>", b.Literal("{}")))});
  const Grammar g = b.Build(root).value();
  EXPECT_TRUE(Accepts(g, "</think>{}"));
  EXPECT_TRUE(Accepts(g, "any <think> text, </thin and </ <//think></think>{}"));
  EXPECT_FALSE(Accepts(g, "no trigger {}"));
  EXPECT_FALSE(Accepts(g, "</think>"));
  // The first occurrence ends the free text: what follows must be the rest.
  EXPECT_FALSE(AcceptsPrefix(g, "a</think>b"));
  EXPECT_FALSE(AcceptsPrefix(g, "</think></think>"));
  // A trigger with a repeated prefix (KMP's borders).
  GrammarBuilder b2;
  const RuleId root2 = b2.AddRule("root");
  b2.AddAlternative(root2, {GrammarBuilder::Ref(b2.TextUntil("aab", b2.Literal("!")))});
  const Grammar g2 = b2.Build(root2).value();
  EXPECT_TRUE(Accepts(g2, "aaab!"));
  EXPECT_TRUE(Accepts(g2, "abaab!"));
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
