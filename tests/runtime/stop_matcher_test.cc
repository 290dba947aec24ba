// StopMatcher: holdback of possible stop-string prefixes, matches spanning pieces, the
// earliest of several stop strings, release of held text when ruled out or at the end.
#include "runtime/stop_matcher.h"

#include <gtest/gtest.h>

namespace shardlm {
namespace {

TEST(StopMatcherTest, NoStopsPassesEverything) {
  StopMatcher m;
  EXPECT_EQ(m.Push("hello"), "hello");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, MatchInsideOnePiece) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("abcENDdef"), "abc");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, MatchSpanningPiecesHoldsPrefix) {
  StopMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.Push("Hi there."), "Hi there.");
  EXPECT_EQ(m.Push("\n"), "");
  EXPECT_EQ(m.Push("\nUs"), "");
  EXPECT_EQ(m.Push("er: next"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, HeldTextReleasedWhenRuledOut) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.Push("xa"), "x");
  EXPECT_EQ(m.Push("b"), "");
  EXPECT_EQ(m.Push("d"), "abd");
  EXPECT_EQ(m.Push("ab"), "");
  EXPECT_EQ(m.Flush(), "ab");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, OverlappingPrefixes) {
  StopMatcher m({"aab"});
  EXPECT_EQ(m.Push("aa"), "");
  EXPECT_EQ(m.Push("a"), "a");  // "aaa": only the last "aa" can still start "aab"
  EXPECT_EQ(m.Push("b!"), "");  // "aab" matches at the start of the held text
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, EarliestOfSeveralAndEmptyIgnored) {
  StopMatcher m({"", "world", "lo w"});
  EXPECT_EQ(m.Push("hello world"), "hel");
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcherTest, MultiByteCharacters) {
  StopMatcher m({"é!"});
  EXPECT_EQ(m.Push("café"), "caf");
  EXPECT_EQ(m.Push("?"), "é?");
  EXPECT_EQ(m.Push("é"), "");
  EXPECT_EQ(m.Push("!"), "");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace shardlm
