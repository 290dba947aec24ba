// StopMatcher: holdback of possible stop-string prefixes, matches spanning pieces, the
// earliest of several stop strings, release of held text when ruled out or at the end; the
// same outputs as a naive rescan on random streams, and time linear in the text pushed.
#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace shardlm {
namespace stop_matcher_test {

// What each push must release, in order: {piece pushed, text released}.
using Pushes = std::vector<std::pair<std::string, std::string>>;

void ExpectReleases(StopMatcher& m, const Pushes& pushes) {
  for (const auto& [piece, released] : pushes) EXPECT_EQ(m.Push(piece), released) << piece;
}

TEST(StopMatcherTest, NoStopsPassesEverything) {
  StopMatcher m;
  EXPECT_EQ(m.Push("hello"), "hello");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, MatchInsideOnePiece) {
  StopMatcher m({"END"});
  ExpectReleases(m, {{"abcENDdef", "abc"}});
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  ExpectReleases(m, {{"more", ""}});
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, MatchSpanningPiecesHoldsPrefix) {
  StopMatcher m({"\n\nUser:"});
  ExpectReleases(m, {{"Hi there.", "Hi there."}, {"\n", ""}, {"\nUs", ""}, {"er: next", ""}});
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, HeldTextReleasedWhenRuledOut) {
  StopMatcher m({"abc"});
  ExpectReleases(m, {{"xa", "x"}, {"b", ""}, {"d", "abd"}, {"ab", ""}});
  EXPECT_EQ(m.Flush(), "ab");
  EXPECT_FALSE(m.stopped());
}

// After "aaa" only the last "aa" can still start "aab"; then "aab" matches at the start of
// the held text.
TEST(StopMatcherTest, OverlappingPrefixes) {
  StopMatcher m({"aab"});
  ExpectReleases(m, {{"aa", ""}, {"a", "a"}, {"b!", ""}});
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, EarliestOfSeveralAndEmptyIgnored) {
  StopMatcher m({"", "world", "lo w"});
  EXPECT_EQ(m.Push("hello world"), "hel");
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcherTest, MultiByteCharacters) {
  StopMatcher m({"é!"});
  ExpectReleases(m, {{"café", "caf"}, {"?", "é?"}, {"é", ""}, {"!", ""}});
  EXPECT_TRUE(m.stopped());
}

// The obvious matcher, kept as the reference: on every push it searches the held text plus
// the new piece for each stop string, then holds back the longest tail that is a proper
// prefix of one. Quadratic in the stop length per push, plainly right.
class NaiveStopMatcher {
 public:
  explicit NaiveStopMatcher(const std::vector<std::string>& stops) {
    for (const std::string& stop : stops) {
      if (!stop.empty()) stops_.push_back(stop);
    }
  }
  std::string Push(std::string_view text) {
    if (stopped_) return "";
    if (stops_.empty()) return std::string(text);
    held_.append(text);
    size_t best = std::string::npos;
    for (const std::string& stop : stops_) {
      const size_t at = held_.find(stop);
      if (at < best) {
        best = at;
        matched_ = stop;
      }
    }
    if (best != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, best);
      held_.clear();
      return out;
    }
    size_t keep = 0;
    for (const std::string& stop : stops_) {
      for (size_t len = std::min(stop.size() - 1, held_.size()); len > keep; --len) {
        if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
          keep = len;
          break;
        }
      }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }
  std::string Flush() {
    std::string out;
    out.swap(held_);
    return stopped_ ? std::string() : out;
  }
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

// A stop string longer than kMaxStopStringBytes is the caller's error: debug builds stop at
// the constructor; release builds still find it.
TEST(StopMatcherTest, OverLongStopIsCheckedInDebugBuildsAndStillMatched) {
  const std::string too_long(StopMatcher::kMaxStopStringBytes + 1, 'x');
  EXPECT_DEBUG_DEATH(
      {
        StopMatcher m({too_long});
        EXPECT_EQ(m.Push("ab" + too_long + "cd"), "ab");
        EXPECT_TRUE(m.stopped());
      },
      "CHECK failed");
}

// Random streams over a three-letter alphabet (so stop strings, their prefixes and their
// overlaps occur all the time), cut into random pieces, against random sets of up to four
// stop strings with empties and duplicates: every push, the stop state and the flush agree.
TEST(StopMatcherTest, SameOutputsAsNaiveRescanOnRandomStreams) {
  std::mt19937 rng(20240611);
  const auto below = [&rng](int n) { return int(rng() % unsigned(n)); };
  const auto random_text = [&](int max_len) {
    std::string text(size_t(below(max_len + 1)), 'a');
    for (char& c : text) c = char('a' + below(3));
    return text;
  };
  int matches = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<std::string> stops;
    for (int i = below(5); i > 0; --i) {
      stops.push_back(below(4) == 0 && !stops.empty() ? stops[size_t(below(int(stops.size())))]
                                                      : random_text(6));
    }
    StopMatcher fast(stops);
    NaiveStopMatcher naive(stops);
    const std::string stream = random_text(60);
    std::string released;
    for (size_t at = 0; at < stream.size();) {
      const size_t piece = std::min(stream.size() - at, size_t(below(6)));
      const std::string_view text = std::string_view(stream).substr(at, piece);
      at += piece;
      const std::string want = naive.Push(text);
      ASSERT_EQ(fast.Push(text), want) << "trial " << trial << " at byte " << at;
      ASSERT_EQ(fast.stopped(), naive.stopped()) << "trial " << trial;
      released += want;
    }
    ASSERT_EQ(fast.Flush(), naive.Flush()) << "trial " << trial;
    ASSERT_EQ(fast.matched(), naive.matched()) << "trial " << trial;
    matches += naive.stopped() ? 1 : 0;
  }
  // The generator is only useful if it produces both outcomes often.
  EXPECT_GT(matches, 2000);
  EXPECT_LT(matches, 18000);
}

// The adversary of a rescanning matcher: stop strings of the longest accepted length that a
// stream of 'a' keeps almost completing ("aaa...ab" holds back a whole stop length; "a...a"
// with a 'c' in the middle fails only half-way through every comparison), fed one byte at a
// time. A rescan compares close to a million bytes per byte pushed here (seconds for this
// stream); a matcher linear in the text pushed takes milliseconds, so the bound is generous
// (sanitizers, a busy machine) and still far below the rescan's time.
TEST(StopMatcherTest, AdversarialStopsOverALongStreamTakeLinearTime) {
  constexpr size_t kMax = StopMatcher::kMaxStopStringBytes;
  // kMax bytes of 'a' but for `byte` at `at`.
  const auto a_run_with = [](size_t at, char byte) {
    std::string text(kMax, 'a');
    text[at] = byte;
    return text;
  };
  const std::string almost = a_run_with(kMax - 1, 'b');
  std::vector<std::string> stops;
  for (size_t at : {kMax / 2, kMax / 2 + 1, kMax / 2 - 1}) stops.push_back(a_run_with(at, 'c'));
  stops.push_back(almost);
  StopMatcher matcher(stops);
  constexpr size_t kBytes = 1 << 18;
  const auto start = std::chrono::steady_clock::now();
  size_t released = 0;
  for (size_t i = 0; i < kBytes; ++i) released += matcher.Push("a").size();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(matcher.stopped());
  // Everything but the longest tail that could still become "aaa...ab" is out.
  EXPECT_EQ(released, kBytes - (kMax - 1));
  EXPECT_EQ(matcher.Flush(), std::string(kMax - 1, 'a'));
  EXPECT_LT(seconds, 0.5) << kBytes << " one-byte pushes";
  // And the stop is still found once the stream completes it.
  EXPECT_EQ(matcher.Push(almost), "");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched(), almost);
}

}  // namespace stop_matcher_test
}  // namespace shardlm
