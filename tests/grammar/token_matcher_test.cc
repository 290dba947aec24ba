// Token masks over small hand-made vocabularies: which tokens a state allows (multi-byte
// tokens that cross a grammar boundary included), end-of-generation only once the value is
// complete, special tokens never, the cache, and a brute-force check of every mask against
// the byte automaton on a JSON schema.
#include "grammar/token_matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/json_schema.h"

namespace shardlm::grammar {
namespace {

constexpr TokenId kEog = 0;

// Token ids 1.. are the given pieces; 0 is EOG; an empty piece is a special token.
std::shared_ptr<const TokenVocabulary> Vocab(std::vector<std::string> pieces) {
  pieces.insert(pieces.begin(), "");
  return TokenVocabulary::FromPieces(std::move(pieces), {kEog});
}

std::shared_ptr<TokenAutomaton> Automaton(const char* schema,
                                          std::shared_ptr<const TokenVocabulary> vocab) {
  auto grammar = std::make_shared<Grammar>(JsonSchemaGrammar(Json::parse(schema)).value());
  return std::make_shared<TokenAutomaton>(grammar, std::move(vocab));
}

std::vector<std::string> Allowed(TokenMatcher& matcher, const TokenVocabulary& vocab,
                                 const std::vector<std::string>& names) {
  std::vector<uint64_t> mask(MaskWords(vocab.n_vocab()));
  const int32_t count = matcher.FillMask(mask);
  std::vector<std::string> out;
  for (TokenId id = 0; id < vocab.n_vocab(); ++id) {
    if (MaskHas(mask, id)) out.push_back(names[size_t(id)]);
  }
  EXPECT_EQ(count, int32_t(out.size()));
  return out;
}

TEST(TokenMatcher, MasksFollowTheGrammarAcrossTokenBoundaries) {
  const std::vector<std::string> pieces = {"{",  "}", "\"", "\"a\"", "a", "\":",  "1",  "12",
                                           "1}", " ", "\n", "x",     "",  "true", "}}", ":"};
  std::vector<std::string> names = {"<eog>"};
  for (const std::string& p : pieces) names.push_back(p.empty() ? "<special>" : p);
  auto vocab = Vocab(pieces);
  TokenMatcher m(Automaton(R"({"type":"object","properties":{"a":{"type":"integer"}},
      "required":["a"]})",
                           vocab));
  using V = std::vector<std::string>;
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"{"}));
  ASSERT_TRUE(m.Accept(1));  // {
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"\"", "\"a\"", " ", "\n"}));
  ASSERT_TRUE(m.Accept(3));  // "
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"a"}));
  ASSERT_TRUE(m.Accept(5));  // a
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"\"", "\":"}));
  ASSERT_TRUE(m.Accept(6));  // ":
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"1", "12", "1}", " ", "\n"}));
  EXPECT_FALSE(m.Accept(14));  // true: refused, nothing moves
  ASSERT_TRUE(m.Accept(8));    // 12
  EXPECT_FALSE(m.CanEnd());
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"}", "1", "12", "1}", " ", "\n"}));
  ASSERT_TRUE(m.Accept(2));  // }
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.IsComplete());
  // Complete: only end-of-generation remains.
  EXPECT_EQ(Allowed(m, *vocab, names), (V{"<eog>"}));
  EXPECT_TRUE(m.Accept(kEog));
}

TEST(TokenMatcher, EndOfGenerationOnlyWhenTheValueMayEnd) {
  auto vocab = Vocab({"1", "2", ".", "5"});
  TokenMatcher m(Automaton(R"({"type":"number"})", vocab));
  std::vector<uint64_t> mask(MaskWords(vocab->n_vocab()));
  m.FillMask(mask);
  EXPECT_FALSE(MaskHas(mask, kEog));
  EXPECT_FALSE(m.Accept(kEog));
  ASSERT_TRUE(m.Accept(1));
  m.FillMask(mask);
  EXPECT_TRUE(MaskHas(mask, kEog));  // "1" is a number, and so are "12", "1.5"
  EXPECT_TRUE(MaskHas(mask, 2));
  EXPECT_FALSE(m.IsComplete());
  ASSERT_TRUE(m.Accept(3));  // "1."
  m.FillMask(mask);
  EXPECT_FALSE(MaskHas(mask, kEog));
}

TEST(TokenMatcher, SpecialTokensAreNeverAllowed) {
  std::vector<std::string> pieces = {"a", "\"", ""};  // id 3 is special (no bytes)
  auto vocab = Vocab(pieces);
  TokenMatcher m(Automaton(R"({"type":"string"})", vocab));
  ASSERT_TRUE(m.Accept(2));
  std::vector<uint64_t> mask(MaskWords(vocab->n_vocab()));
  EXPECT_EQ(m.FillMask(mask), 2);
  EXPECT_FALSE(MaskHas(mask, 3));
  EXPECT_FALSE(m.Accept(3));
}

TEST(TokenMatcher, MasksAreCachedPerState) {
  auto vocab = Vocab({"\"", "a", "b", "ab"});
  auto automaton = Automaton(R"({"type":"string"})", vocab);
  TokenMatcher m(automaton);
  std::vector<uint64_t> mask(MaskWords(vocab->n_vocab()));
  m.FillMask(mask);
  ASSERT_TRUE(m.Accept(1));
  for (int i = 0; i < 100; ++i) {
    m.FillMask(mask);
    ASSERT_TRUE(m.Accept(TokenId(2 + i % 3)));
  }
  // The start, and inside the string: two walks of the trie for 101 masks.
  EXPECT_EQ(automaton->masks_computed(), 2);
  // A second request over the same automaton computes nothing new.
  TokenMatcher again(automaton);
  again.FillMask(mask);
  ASSERT_TRUE(again.Accept(1));
  again.FillMask(mask);
  EXPECT_EQ(automaton->masks_computed(), 2);
}

// Every token of a random vocabulary is in the mask exactly when walking its bytes through
// the byte automaton from the same state stays alive.
TEST(TokenMatcher, MaskEqualsBruteForceOnRandomVocabulary) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":, \n0123456789.-eabnrtufls\\<>/\xc3\xa9";
  std::vector<std::string> pieces;
  for (int i = 0; i < 3000; ++i) {
    std::string piece;
    const int len = 1 + int(rng() % 5);
    for (int j = 0; j < len; ++j) piece += alphabet[rng() % alphabet.size()];
    pieces.push_back(piece);
  }
  for (char c : alphabet) pieces.push_back(std::string(1, c));
  auto vocab = Vocab(pieces);
  auto automaton = Automaton(R"({"type":"object","properties":{"s":{"type":"string"},
      "n":{"type":"array","items":{"type":"number"}},"b":{"enum":[true,"false",null]}},
      "required":["s","n"]})",
                             vocab);
  TokenMatcher m(automaton);
  std::vector<uint64_t> mask(MaskWords(vocab->n_vocab()));
  ByteAutomaton& bytes = automaton->bytes();
  ByteAutomaton::StateId state = bytes.initial();
  for (int step = 0; step < 200 && !m.IsComplete(); ++step) {
    const int32_t count = m.FillMask(mask);
    std::vector<TokenId> allowed;
    for (TokenId id = 1; id < vocab->n_vocab(); ++id) {
      const bool alive = bytes.Walk(state, vocab->bytes(id)) != ByteAutomaton::kDead;
      ASSERT_EQ(MaskHas(mask, id), alive)
          << "step " << step << " token '" << vocab->bytes(id) << "'";
      if (alive) allowed.push_back(id);
    }
    ASSERT_EQ(MaskHas(mask, kEog), bytes.CanEnd(state));
    ASSERT_EQ(count, int32_t(allowed.size()) + (bytes.CanEnd(state) ? 1 : 0));
    ASSERT_FALSE(allowed.empty()) << "step " << step;
    const TokenId pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.Accept(pick));
    state = bytes.Walk(state, vocab->bytes(pick));
  }
}

}  // namespace
}  // namespace shardlm::grammar
