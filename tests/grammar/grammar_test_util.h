// Helpers of the grammar tests: does a grammar accept a byte string whole, or as a prefix.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string_view>

#include "grammar/byte_automaton.h"
#include "grammar/grammar.h"

namespace shardlm::grammar::testing {

// The automaton state after `text`, from the start (kDead when a byte is refused).
inline ByteAutomaton::StateId StateAfter(ByteAutomaton& automaton, std::string_view text) {
  return automaton.Walk(automaton.initial(), text);
}

// `text` is a whole sentence of the grammar.
inline bool Accepts(const Grammar& grammar, std::string_view text) {
  ByteAutomaton automaton(std::make_shared<Grammar>(grammar));
  const ByteAutomaton::StateId state = StateAfter(automaton, text);
  return state != ByteAutomaton::kDead && automaton.CanEnd(state);
}

// `text` can be continued into a sentence.
inline bool AcceptsPrefix(const Grammar& grammar, std::string_view text) {
  ByteAutomaton automaton(std::make_shared<Grammar>(grammar));
  return StateAfter(automaton, text) != ByteAutomaton::kDead;
}

// Each of `sentences` is a whole sentence of the grammar and none of `non_sentences` is one;
// a failure names the text.
inline void ExpectSentences(const Grammar& grammar,
                            std::initializer_list<std::string_view> sentences,
                            std::initializer_list<std::string_view> non_sentences) {
  for (std::string_view text : sentences) EXPECT_TRUE(Accepts(grammar, text)) << text;
  for (std::string_view text : non_sentences) EXPECT_FALSE(Accepts(grammar, text)) << text;
}

}  // namespace shardlm::grammar::testing
