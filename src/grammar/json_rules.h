// JsonRules: the rules of JSON's own syntax, added to a GrammarBuilder once and shared by
// every schema compiled into it: whitespace, strings (optionally of bounded length, and
// never containing given tags), numbers, literals, and values of any shape up to a depth.
//
// Choices that make a random model's output finite and parseable by strict parsers:
//  - whitespace between tokens is bounded: nothing, one space, or one newline and up to
//    kMaxIndent spaces or tabs (enough for pretty-printed JSON; unbounded whitespace would
//    let a model write blanks forever);
//  - strings are well-formed UTF-8 with JSON's escapes; \u escapes of UTF-16 surrogates
//    are not written (a lone one makes strict parsers fail);
//  - numbers have at most 18 integer digits, 16 fraction digits and a 2-digit exponent, so
//    they always fit a double (and integers an int64): a parser never overflows;
//  - containers nest at most max_depth deep.
// Forbidden tags: a JSON string is the one place where a model could write text that a
// later parser of the output takes for markup (a "</tool_call>" inside an argument would
// end the call early). Strings avoid every given tag byte for byte (an Aho-Corasick
// automaton over the tags, run inside the string rules).
//
// Thread safety: a plain helper over one builder, for one thread. Lifetime: references
// the builder, which must outlive it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace shardlm::grammar {

using Json = nlohmann::ordered_json;

// The deepest nesting of arrays and objects a JSON grammar writes, counting from the value
// it starts at. Servers parse JSON with depth limits of their own (64 here); 32 leaves room
// for the wrapping a tool call adds.
inline constexpr int kDefaultMaxJsonDepth = 32;
// Most spaces or tabs after a newline between two JSON tokens.
inline constexpr int kMaxIndent = 20;
// The largest count a length or item bound expands to (each count is a grammar state).
// A larger minimum is refused; a larger maximum is lowered to this (the output still
// validates).
inline constexpr int kMaxExpandedCount = 1024;

struct JsonGrammarOptions {
  // Byte strings no JSON string may contain. Each must be ASCII, start with '<' and hold
  // no '"' or '\\' (the tags of chat formats), which is what keeps the avoidance exact
  // across escapes and multi-byte characters.
  std::vector<std::string> forbidden_in_strings;
  int max_depth = kDefaultMaxJsonDepth;

  Status Validate() const;
};

class JsonRules {
 public:
  // `options` must be valid.
  JsonRules(GrammarBuilder& builder, JsonGrammarOptions options);

  GrammarBuilder& builder() { return builder_; }
  const JsonGrammarOptions& options() const { return options_; }

  RuleId Whitespace();
  // A string of min..max characters (code points; max < 0: no bound).
  RuleId String(int min_chars = 0, int max_chars = -1);
  RuleId Integer();
  // An integer of at most `digits` digits (0: only 0), with a minus sign when `negative`.
  RuleId BoundedInteger(int digits, bool negative);
  static constexpr int kMaxIntegerDigits = 18;
  RuleId Number();
  RuleId Boolean();
  RuleId Null();
  // Any JSON value / object / array at nesting depth `depth` (containers only while
  // depth < max_depth; past it an object or array rule has no alternative, which Build
  // drops).
  RuleId AnyValue(int depth);
  RuleId AnyObject(int depth);
  RuleId AnyArray(int depth);
  // The compact JSON text of `value`, as bytes to match.
  Sequence Literal(const Json& value);
  // "{" ws [members] ws "}" or "[" ... "]": the container around a rule of members.
  Sequence Wrap(char open, RuleId members, char close);

 private:
  // The rule shared under `key` (false), or a new rule named `name`, shared under `key`
  // before its alternatives are added so that recursive uses find it (true: define it).
  bool Define(const std::string& key, const std::string& name, RuleId* rule);
  RuleId Utf8Multibyte();
  RuleId Escape();
  RuleId Digits(int min, int max);
  void BuildTagAutomaton();

  GrammarBuilder& builder_;
  JsonGrammarOptions options_;
  // The tag automaton: per state, the state after each ASCII byte (-1: a tag completed).
  std::vector<std::array<int32_t, 128>> tag_next_;
};

}  // namespace shardlm::grammar
