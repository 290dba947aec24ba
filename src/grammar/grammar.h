// Grammar: a context-free grammar over bytes, the form every output constraint takes before
// it is matched (a JSON Schema, a tool call's syntax, free text up to a trigger).
//
// A grammar is a set of rules; a rule is a list of alternatives; an alternative is a
// sequence of symbols, each a set of bytes (matches one byte in the set) or a reference to
// a rule. GrammarBuilder collects rules, then Build checks and freezes them into a Grammar:
// rules that can never finish (a recursion with no way out) are dropped with every
// alternative that uses them, unreachable rules are dropped, and left recursion is refused
// (the matcher expands rules eagerly, which left recursion would never stop).
//
// Goals: a small, immutable, flattened form the byte automaton (byte_automaton.h) walks
// with integer positions; a fingerprint and an equality test, so compiled automata can be
// shared between requests that ask for the same grammar; a readable dump for tests and
// errors (GBNF-like).
// Non-goals: parsing grammar text (GBNF), semantic actions, ambiguity detection (an
// ambiguous grammar is fine: the matcher tracks every parse).
//
// Thread safety: Grammar is immutable after Build; GrammarBuilder is a plain value for one
// thread. Lifetime: independent values.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace shardlm::grammar {

using RuleId = int32_t;

// A set of byte values.
class ByteSet {
 public:
  static ByteSet Of(uint8_t byte) { return ByteSet().Add(byte); }
  static ByteSet Range(uint8_t lo, uint8_t hi) { return ByteSet().AddRange(lo, hi); }
  // Every byte of `chars`.
  static ByteSet Chars(std::string_view chars);

  ByteSet& Add(uint8_t byte) {
    words_[byte >> 6] |= uint64_t{1} << (byte & 63);
    return *this;
  }
  ByteSet& AddRange(uint8_t lo, uint8_t hi);
  ByteSet& Remove(uint8_t byte) {
    words_[byte >> 6] &= ~(uint64_t{1} << (byte & 63));
    return *this;
  }
  bool Has(uint8_t byte) const { return (words_[byte >> 6] >> (byte & 63)) & 1; }
  bool empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
  int count() const;
  bool operator==(const ByteSet&) const = default;
  const std::array<uint64_t, 4>& words() const { return words_; }

 private:
  std::array<uint64_t, 4> words_{};
};

// One symbol of an alternative: a byte set (index into the builder's sets) or a rule.
struct Symbol {
  enum class Kind : uint8_t { kBytes, kRule, kSentinel };
  Kind kind = Kind::kBytes;
  int32_t index = 0;  // kBytes: byte set index; kRule: rule id
  bool operator==(const Symbol&) const = default;
};
using Sequence = std::vector<Symbol>;

class Grammar;

// The most symbols a grammar may hold: a bound on what one request can make the server
// build (a schema of 10^4 strings with maxLength 1000 would otherwise expand to 10^7).
// Real schemas, tool lists included, stay far below.
inline constexpr size_t kMaxGrammarSymbols = size_t{1} << 20;

class GrammarBuilder {
 public:
  // A new rule with no alternatives yet (it may be referenced before it is defined, for
  // recursion). `name` is for dumps and errors; a taken name gets a numeric suffix.
  RuleId AddRule(std::string_view name);
  void AddAlternative(RuleId rule, Sequence sequence);
  // The rule registered under exactly `name` by Remember, if any: shared helper rules.
  std::optional<RuleId> Find(std::string_view key) const;
  void Remember(std::string key, RuleId rule) { memo_[std::move(key)] = rule; }

  Symbol Bytes(const ByteSet& set);
  Symbol Byte(uint8_t byte) { return Bytes(ByteSet::Of(byte)); }
  static Symbol Ref(RuleId rule) { return Symbol{Symbol::Kind::kRule, rule}; }
  // One byte symbol per byte of `text`.
  Sequence Literal(std::string_view text);
  // A rule matching `item` between min and max times (max < 0: no bound), with `separator`
  // between items (may be empty). Rules for the same (item, separator, min, max) are shared.
  RuleId Repeat(const Sequence& item, const Sequence& separator, int min, int max);
  // A rule matching any bytes up to and including the first occurrence of `trigger`, then
  // `then`: free text (a model's reasoning) before a constrained part. `trigger` must not
  // be empty.
  RuleId TextUntil(std::string_view trigger, const Sequence& then);

  int32_t n_rules() const { return int32_t(rules_.size()); }
  size_t n_symbols() const { return n_symbols_; }
  // Symbols past kMaxGrammarSymbols: Build refuses, and a compiler should stop early.
  bool too_big() const { return n_symbols_ > kMaxGrammarSymbols; }
  const std::string& rule_name(RuleId rule) const { return rules_[size_t(rule)].name; }

  // Checks and freezes the rules reachable from `root`. Errors (kInvalidArgument): a
  // reference to a rule that does not exist, left recursion (names the rule), a root that
  // can never finish, more than kMaxGrammarSymbols symbols.
  Result<Grammar> Build(RuleId root) const;

 private:
  struct Rule {
    std::string name;
    std::vector<Sequence> alternatives;
  };
  std::vector<bool> ProductiveRules() const;

  std::vector<Rule> rules_;
  std::vector<ByteSet> byte_sets_;
  std::unordered_map<std::string, int32_t> set_index_;  // ByteSet words → index
  std::unordered_map<std::string, int> name_counts_;
  std::unordered_map<std::string, RuleId> memo_;
  size_t n_symbols_ = 0;
};

// The frozen grammar: every alternative of every rule laid out in one array of elements,
// each alternative ending with a kEnd element; a position is an index into that array.
class Grammar {
 public:
  struct Element {
    enum class Kind : uint8_t { kBytes, kRule, kEnd };
    Kind kind = Kind::kEnd;
    int32_t value = 0;  // kBytes: byte set index; kRule: rule id
  };

  RuleId root() const { return root_; }
  int32_t n_rules() const { return int32_t(rule_alts_.size()) - 1; }
  // Start positions of the rule's alternatives.
  std::span<const int32_t> alternatives(RuleId rule) const {
    return std::span(alt_starts_)
        .subspan(size_t(rule_alts_[size_t(rule)]),
                 size_t(rule_alts_[size_t(rule) + 1] - rule_alts_[size_t(rule)]));
  }
  const Element& element(int32_t pos) const { return elements_[size_t(pos)]; }
  const ByteSet& byte_set(int32_t index) const { return byte_sets_[size_t(index)]; }
  size_t n_elements() const { return elements_.size(); }
  const std::string& rule_name(RuleId rule) const { return names_[size_t(rule)]; }

  // A hash of the structure (not the names): equal grammars have equal fingerprints.
  uint64_t fingerprint() const { return fingerprint_; }
  // Same rules, alternatives and byte sets (names aside).
  bool SameAs(const Grammar& other) const;
  // One line per rule, `name ::= alt | alt`, byte sets as [a-z] classes.
  std::string ToString() const;

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<int32_t> alt_starts_;
  std::vector<int32_t> rule_alts_;  // [n_rules + 1] offsets into alt_starts_
  std::vector<ByteSet> byte_sets_;
  std::vector<std::string> names_;
  RuleId root_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace shardlm::grammar
