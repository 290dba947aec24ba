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
// Gemma notation (Notation::kGemma): the same values in the notation Gemma 4's templates
// write a tool call's arguments in (output_syntax.h): a string between two <|"|> markers
// with its text raw (any character, newlines and quotes too, no escapes; never the marker,
// which ends it, nor a forbidden tag), object keys bare (a key is its text: the schema's
// property names, or word characters [A-Za-z0-9_.-] for keys no schema names), the members
// of an object in the order Gemma's templates sort keys (case-insensitively, as Jinja's
// dictsort), no whitespace between tokens (the templates write none); numbers, true, false
// and null as in JSON.
//
// Thread safety: a plain helper over one builder, for one thread. Lifetime: references
// the builder, which must outlive it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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
// What a Gemma-notation string starts and ends with (a forbidden tag inside it).
inline constexpr std::string_view kGemmaStringMarker = "<|\"|>";
// The largest count a length or item bound expands to (each count is a grammar state).
// A larger minimum is refused; a larger maximum is lowered to this (the output still
// validates).
inline constexpr int kMaxExpandedCount = 1024;

enum class Notation { kJson, kGemma, kSentinel };

struct JsonGrammarOptions {
  // Byte strings no JSON string may contain. Each must be ASCII, start with '<' and (in
  // JSON notation) hold no '"' or '\\' (the tags of chat formats), which is what keeps the
  // avoidance exact across escapes and multi-byte characters.
  std::vector<std::string> forbidden_in_strings;
  int max_depth = kDefaultMaxJsonDepth;
  Notation notation = Notation::kJson;

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
  // An object's key: `name` as the notation writes it, or any key.
  Sequence Key(const std::string& name);
  RuleId AnyKey();
  // The order the notation writes an object's members in, given their names in the
  // schema's order: indices into `names`.
  std::vector<size_t> MemberOrder(const std::vector<std::string>& names) const;
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
  // The compact text of `value` in the notation, as bytes to match.
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
  // The string rules: JSON's, and Gemma's between <|"|> markers.
  RuleId JsonString(RuleId string, int min_chars, int max_chars);
  RuleId GemmaString(RuleId string, int min_chars, int max_chars);
  std::string Text(const Json& value) const;
  void BuildTagAutomaton();

  GrammarBuilder& builder_;
  JsonGrammarOptions options_;
  // The tag automaton: per state, the state after each ASCII byte (-1: a tag completed).
  std::vector<std::array<int32_t, 128>> tag_next_;
};

}  // namespace shardlm::grammar
