// JsonRules: JSON's lexical and structural rules, shared through the builder's memo (see
// json_rules.h).
#include "grammar/json_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <deque>

#include "base/check.h"

namespace shardlm::grammar {
namespace {

// The characters of a string of min_chars..max_chars characters (max_chars < 0: no upper
// bound), one rule per count written so far (the count stops at min_chars without an upper
// bound): each character a byte of `plain`, a multibyte UTF-8 sequence, or (escape given) a
// backslash and an escape.
RuleId CountedChars(GrammarBuilder& b, const ByteSet& plain, const Symbol* escape, Symbol utf8,
                    int min_chars, int max_chars) {
  const int last = max_chars < 0 ? min_chars : max_chars;
  std::vector<RuleId> chars(size_t(last) + 1);
  for (RuleId& rule : chars) rule = b.AddRule("chars");
  for (int k = 0; k <= last; ++k) {
    const RuleId self = chars[size_t(k)];
    if (k >= min_chars) b.AddAlternative(self, {});
    if (max_chars >= 0 && k == max_chars) continue;
    const Symbol next = GrammarBuilder::Ref(chars[size_t(std::min(k + 1, last))]);
    b.AddAlternative(self, {b.Bytes(plain), next});
    if (escape != nullptr) b.AddAlternative(self, {b.Byte('\\'), *escape, next});
    b.AddAlternative(self, {utf8, next});
  }
  return chars[0];
}

// Bytes a JSON string holds as they are: printable ASCII but the quote and the backslash.
ByteSet PlainStringBytes() {
  ByteSet set = ByteSet::Range(0x20, 0x7f);
  set.Remove('"').Remove('\\');
  return set;
}

ByteSet HexDigits() { return ByteSet::Range('0', '9').AddRange('a', 'f').AddRange('A', 'F'); }

}  // namespace

Status JsonGrammarOptions::Validate() const {
  if (max_depth < 0 || max_depth > 256) {
    return InvalidArgument("json grammar: max_depth {} is outside [0, 256]", max_depth);
  }
  if (notation != Notation::kJson && notation != Notation::kGemma) {
    return InvalidArgument("json grammar: unknown notation {}", int(notation));
  }
  // Gemma's strings have no escapes: a quote or backslash in a tag is matched as it is.
  const bool escapes = notation == Notation::kJson;
  for (const std::string& tag : forbidden_in_strings) {
    bool ok = tag.size() >= 2 && tag[0] == '<';
    for (char c : tag) {
      ok = ok && uint8_t(c) >= 0x20 && uint8_t(c) < 0x80 && (!escapes || (c != '"' && c != '\\'));
    }
    if (!ok) {
      return InvalidArgument(
          "json grammar: a forbidden tag must be ASCII, start with '<' and hold no quote or "
          "backslash; got '{}'",
          tag);
    }
  }
  return Status::Ok();
}

JsonRules::JsonRules(GrammarBuilder& builder, JsonGrammarOptions options)
    : builder_(builder), options_(std::move(options)) {
  SHARDLM_CHECK(options_.Validate().ok());
  // A Gemma string ends at its marker, so its text can never hold one.
  if (options_.notation == Notation::kGemma) {
    options_.forbidden_in_strings.emplace_back(kGemmaStringMarker);
  }
  BuildTagAutomaton();
}

bool JsonRules::Define(const std::string& key, const std::string& name, RuleId* rule) {
  // Rules of both notations may share a builder: their keys differ.
  const std::string full = options_.notation == Notation::kGemma ? "gemma:" + key : key;
  if (std::optional<RuleId> known = builder_.Find(full)) {
    *rule = *known;
    return false;
  }
  *rule = builder_.AddRule(name);
  builder_.Remember(full, *rule);
  return true;
}

// Aho-Corasick over the tags: state = the longest suffix of the string so far that is a
// prefix of a tag; a transition into a state that ends a tag (itself or through its
// suffixes) is -1, forbidden.
void JsonRules::BuildTagAutomaton() {
  std::vector<std::array<int32_t, 128>> child(1);
  child[0].fill(-1);
  std::vector<bool> ends_tag(1, false);
  for (const std::string& tag : options_.forbidden_in_strings) {
    int32_t node = 0;
    for (char c : tag) {
      if (child[size_t(node)][size_t(c)] < 0) {
        child[size_t(node)][size_t(c)] = int32_t(child.size());
        child.emplace_back().fill(-1);
        ends_tag.push_back(false);
      }
      node = child[size_t(node)][size_t(c)];
    }
    ends_tag[size_t(node)] = true;
  }
  tag_next_.assign(child.size(), {});
  std::vector<int32_t> fail(child.size(), 0);
  std::deque<int32_t> queue = {0};
  while (!queue.empty()) {
    const int32_t node = queue.front();
    queue.pop_front();
    if (ends_tag[size_t(fail[size_t(node)])]) ends_tag[size_t(node)] = true;
    for (int c = 0; c < 128; ++c) {
      const int32_t next = child[size_t(node)][size_t(c)];
      if (next >= 0) {
        fail[size_t(next)] = node == 0 ? 0 : tag_next_[size_t(fail[size_t(node)])][size_t(c)];
        tag_next_[size_t(node)][size_t(c)] = next;
        queue.push_back(next);
      } else {
        tag_next_[size_t(node)][size_t(c)] =
            node == 0 ? 0 : tag_next_[size_t(fail[size_t(node)])][size_t(c)];
      }
    }
  }
  // BFS order puts every state after its fail state, so ends_tag is final once visited;
  // a move into a tag's end is forbidden.
  for (auto& row : tag_next_) {
    for (int32_t& next : row) {
      if (next >= 0 && ends_tag[size_t(next)]) next = -1;
    }
  }
}

RuleId JsonRules::Whitespace() {
  RuleId ws;
  if (!Define("json:ws", "ws", &ws)) return ws;
  GrammarBuilder& b = builder_;
  b.AddAlternative(ws, {});
  if (options_.notation == Notation::kGemma) return ws;
  const RuleId indent = b.Repeat({b.Bytes(ByteSet::Chars(" \t"))}, {}, 0, kMaxIndent);
  b.AddAlternative(ws, {b.Byte(' ')});
  b.AddAlternative(ws, {b.Byte('\n'), GrammarBuilder::Ref(indent)});
  return ws;
}

// Well-formed UTF-8 of two to four bytes (no overlong forms, no surrogates, at most
// U+10FFFF).
RuleId JsonRules::Utf8Multibyte() {
  RuleId rule;
  if (!Define("json:utf8", "utf8-multibyte", &rule)) return rule;
  GrammarBuilder& b = builder_;
  const Symbol tail = b.Bytes(ByteSet::Range(0x80, 0xbf));
  b.AddAlternative(rule, {b.Bytes(ByteSet::Range(0xc2, 0xdf)), tail});
  b.AddAlternative(rule, {b.Byte(0xe0), b.Bytes(ByteSet::Range(0xa0, 0xbf)), tail});
  b.AddAlternative(rule, {b.Bytes(ByteSet::Range(0xe1, 0xec).AddRange(0xee, 0xef)), tail, tail});
  b.AddAlternative(rule, {b.Byte(0xed), b.Bytes(ByteSet::Range(0x80, 0x9f)), tail});
  b.AddAlternative(rule, {b.Byte(0xf0), b.Bytes(ByteSet::Range(0x90, 0xbf)), tail, tail});
  b.AddAlternative(rule, {b.Bytes(ByteSet::Range(0xf1, 0xf3)), tail, tail, tail});
  b.AddAlternative(rule, {b.Byte(0xf4), b.Bytes(ByteSet::Range(0x80, 0x8f)), tail, tail});
  return rule;
}

// What follows a backslash: one of "\/bfnrt, or u and four hex digits that are not a
// UTF-16 surrogate (D800-DFFF).
RuleId JsonRules::Escape() {
  RuleId rule;
  if (!Define("json:escape", "escape", &rule)) return rule;
  GrammarBuilder& b = builder_;
  const Symbol hex = b.Bytes(HexDigits());
  ByteSet not_d = HexDigits();
  not_d.Remove('d').Remove('D');
  b.AddAlternative(rule, {b.Bytes(ByteSet::Chars("\"\\/bfnrt"))});
  b.AddAlternative(rule, {b.Byte('u'), b.Bytes(not_d), hex, hex, hex});
  b.AddAlternative(rule, {b.Byte('u'), b.Bytes(ByteSet::Chars("dD")),
                          b.Bytes(ByteSet::Range('0', '7')), hex, hex});
  return rule;
}

RuleId JsonRules::String(int min_chars, int max_chars) {
  SHARDLM_CHECK(min_chars >= 0 && min_chars <= kMaxExpandedCount &&
                (max_chars < 0 || (max_chars >= min_chars && max_chars <= kMaxExpandedCount)));
  const std::string key = fmt::format("json:string:{}:{}", min_chars, max_chars);
  RuleId string;
  if (!Define(key, "string", &string)) return string;
  return options_.notation == Notation::kGemma ? GemmaString(string, min_chars, max_chars)
                                               : JsonString(string, min_chars, max_chars);
}

RuleId JsonRules::JsonString(RuleId string, int min_chars, int max_chars) {
  GrammarBuilder& b = builder_;
  const bool bounded = min_chars > 0 || max_chars >= 0;
  const bool tags = tag_next_.size() > 1;
  const Symbol escape = GrammarBuilder::Ref(Escape());
  const Symbol utf8 = GrammarBuilder::Ref(Utf8Multibyte());
  if (!tags || bounded) {
    // chars[k]: k characters written (k stops at min when there is no upper bound). With
    // tags, a bounded string leaves out '<' (every tag starts with it) rather than pay for
    // one rule per (count, tag state).
    ByteSet plain = PlainStringBytes();
    if (tags) plain.Remove('<');
    const RuleId chars = CountedChars(b, plain, &escape, utf8, min_chars, max_chars);
    b.AddAlternative(string, {b.Byte('"'), GrammarBuilder::Ref(chars), b.Byte('"')});
    return string;
  }
  // chars[q]: the text so far ends in tag state q. An escape or a multi-byte character
  // holds no '<', so it leaves the automaton at its start.
  std::vector<RuleId> chars(tag_next_.size());
  for (RuleId& rule : chars) rule = b.AddRule("chars");
  for (size_t q = 0; q < tag_next_.size(); ++q) {
    b.AddAlternative(chars[q], {});
    std::vector<ByteSet> by_target(tag_next_.size());
    const ByteSet plain = PlainStringBytes();
    for (int c = 0; c < 128; ++c) {
      const int32_t next = tag_next_[q][size_t(c)];
      if (plain.Has(uint8_t(c)) && next >= 0) by_target[size_t(next)].Add(uint8_t(c));
    }
    for (size_t t = 0; t < by_target.size(); ++t) {
      if (!by_target[t].empty()) {
        b.AddAlternative(chars[q], {b.Bytes(by_target[t]), GrammarBuilder::Ref(chars[t])});
      }
    }
    b.AddAlternative(chars[q], {b.Byte('\\'), escape, GrammarBuilder::Ref(chars[0])});
    b.AddAlternative(chars[q], {utf8, GrammarBuilder::Ref(chars[0])});
  }
  b.AddAlternative(string, {b.Byte('"'), GrammarBuilder::Ref(chars[0]), b.Byte('"')});
  return string;
}

// <|"|>TEXT<|"|>: TEXT any well-formed UTF-8 but ASCII controls other than tab, newline and
// carriage return, as it is (no escapes), never completing a tag (the marker among them).
RuleId JsonRules::GemmaString(RuleId string, int min_chars, int max_chars) {
  GrammarBuilder& b = builder_;
  ByteSet plain = ByteSet::Range(0x20, 0x7f);
  plain.Add('\t').Add('\n').Add('\r');
  const Symbol utf8 = GrammarBuilder::Ref(Utf8Multibyte());
  const Sequence marker = b.Literal(kGemmaStringMarker);
  auto wrap = [&](RuleId chars) {
    Sequence whole = marker;
    whole.push_back(GrammarBuilder::Ref(chars));
    whole.insert(whole.end(), marker.begin(), marker.end());
    b.AddAlternative(string, std::move(whole));
    return string;
  };
  if (min_chars > 0 || max_chars >= 0) {
    // A bounded string leaves out '<' (every tag starts with it) rather than pay for one
    // rule per (count, tag state), as JSON's does.
    plain.Remove('<');
    return wrap(CountedChars(b, plain, nullptr, utf8, min_chars, max_chars));
  }
  // chars[q]: the text so far ends in tag state q; a multi-byte character holds no '<'.
  std::vector<RuleId> chars(tag_next_.size());
  for (RuleId& rule : chars) rule = b.AddRule("chars");
  for (size_t q = 0; q < tag_next_.size(); ++q) {
    b.AddAlternative(chars[q], {});
    std::vector<ByteSet> by_target(tag_next_.size());
    for (int c = 0; c < 128; ++c) {
      const int32_t next = tag_next_[q][size_t(c)];
      if (plain.Has(uint8_t(c)) && next >= 0) by_target[size_t(next)].Add(uint8_t(c));
    }
    for (size_t t = 0; t < by_target.size(); ++t) {
      if (!by_target[t].empty()) {
        b.AddAlternative(chars[q], {b.Bytes(by_target[t]), GrammarBuilder::Ref(chars[t])});
      }
    }
    b.AddAlternative(chars[q], {utf8, GrammarBuilder::Ref(chars[0])});
  }
  return wrap(chars[0]);
}

Sequence JsonRules::Key(const std::string& name) {
  if (options_.notation == Notation::kGemma) return builder_.Literal(name);
  return Literal(Json(name));
}

RuleId JsonRules::AnyKey() {
  if (options_.notation == Notation::kJson) return String();
  RuleId key;
  if (!Define("json:key", "key", &key)) return key;
  const ByteSet word =
      ByteSet::Range('a', 'z').AddRange('A', 'Z').AddRange('0', '9').Add('_').Add('.').Add('-');
  builder_.AddAlternative(
      key,
      {GrammarBuilder::Ref(builder_.Repeat({builder_.Bytes(word)}, {}, 1, kMaxExpandedCount))});
  return key;
}

std::vector<size_t> JsonRules::MemberOrder(const std::vector<std::string>& names) const {
  std::vector<size_t> order(names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (options_.notation != Notation::kGemma) return order;
  auto lower = [](std::string text) {
    for (char& c : text) c = char(std::tolower(uint8_t(c)));
    return text;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lower(names[a]) < lower(names[b]); });
  return order;
}

RuleId JsonRules::Digits(int min, int max) {
  return builder_.Repeat({builder_.Bytes(ByteSet::Range('0', '9'))}, {}, min, max);
}

// -?(0|[1-9][0-9]{0,17}): at most 18 digits, so every value fits an int64.
RuleId JsonRules::Integer() { return BoundedInteger(kMaxIntegerDigits, /*negative=*/true); }

RuleId JsonRules::BoundedInteger(int digits, bool negative) {
  const std::string key = fmt::format("json:integer:{}:{}", digits, negative);
  RuleId integer;
  if (!Define(key, "integer", &integer)) return integer;
  GrammarBuilder& b = builder_;
  const RuleId magnitude = b.AddRule("integer-digits");
  b.AddAlternative(magnitude, {b.Byte('0')});
  if (digits > 0) {
    b.AddAlternative(
        magnitude, {b.Bytes(ByteSet::Range('1', '9')), GrammarBuilder::Ref(Digits(0, digits - 1))});
  }
  b.AddAlternative(integer, {GrammarBuilder::Ref(magnitude)});
  if (negative && digits > 0)
    b.AddAlternative(integer, {b.Byte('-'), GrammarBuilder::Ref(magnitude)});
  return integer;
}

// integer (.[0-9]{1,16})? ([eE][+-]?[0-9]{1,2})?: below 10^118 in magnitude, so no parser
// overflows a double.
RuleId JsonRules::Number() {
  RuleId number;
  if (!Define("json:number", "number", &number)) return number;
  GrammarBuilder& b = builder_;
  const RuleId exponent = b.AddRule("exponent");
  const Symbol digits2 = GrammarBuilder::Ref(Digits(1, 2));
  b.AddAlternative(exponent, {b.Bytes(ByteSet::Chars("eE")), digits2});
  b.AddAlternative(exponent,
                   {b.Bytes(ByteSet::Chars("eE")), b.Bytes(ByteSet::Chars("+-")), digits2});
  const RuleId tail = b.AddRule("number-tail");
  const Symbol fraction = b.Byte('.');
  const Symbol digits16 = GrammarBuilder::Ref(Digits(1, 16));
  b.AddAlternative(tail, {});
  b.AddAlternative(tail, {fraction, digits16});
  b.AddAlternative(tail, {fraction, digits16, GrammarBuilder::Ref(exponent)});
  b.AddAlternative(tail, {GrammarBuilder::Ref(exponent)});
  b.AddAlternative(number, {GrammarBuilder::Ref(Integer()), GrammarBuilder::Ref(tail)});
  return number;
}

RuleId JsonRules::Boolean() {
  RuleId rule;
  if (!Define("json:boolean", "boolean", &rule)) return rule;
  builder_.AddAlternative(rule, builder_.Literal("true"));
  builder_.AddAlternative(rule, builder_.Literal("false"));
  return rule;
}

RuleId JsonRules::Null() {
  RuleId rule;
  if (!Define("json:null", "null", &rule)) return rule;
  builder_.AddAlternative(rule, builder_.Literal("null"));
  return rule;
}

Sequence JsonRules::Wrap(char open, RuleId members, char close) {
  GrammarBuilder& b = builder_;
  const Symbol ws = GrammarBuilder::Ref(Whitespace());
  const RuleId inner = b.AddRule(open == '{' ? "object-inner" : "array-inner");
  b.AddAlternative(inner, {b.Byte(uint8_t(close))});
  b.AddAlternative(inner, {GrammarBuilder::Ref(members), ws, b.Byte(uint8_t(close))});
  return {b.Byte(uint8_t(open)), ws, GrammarBuilder::Ref(inner)};
}

RuleId JsonRules::AnyValue(int depth) {
  const std::string key = fmt::format("json:value:{}", depth);
  RuleId value;
  if (!Define(key, fmt::format("value-{}", depth), &value)) return value;
  GrammarBuilder& b = builder_;
  if (depth < options_.max_depth) {
    b.AddAlternative(value, {GrammarBuilder::Ref(AnyObject(depth))});
    b.AddAlternative(value, {GrammarBuilder::Ref(AnyArray(depth))});
  }
  for (RuleId scalar : {String(), Number(), Boolean(), Null()}) {
    b.AddAlternative(value, {GrammarBuilder::Ref(scalar)});
  }
  return value;
}

RuleId JsonRules::AnyObject(int depth) {
  const std::string key = fmt::format("json:object:{}", depth);
  RuleId object;
  if (!Define(key, fmt::format("object-{}", depth), &object)) return object;
  GrammarBuilder& b = builder_;
  if (depth >= options_.max_depth) return object;  // no alternative: Build drops it
  const Symbol ws = GrammarBuilder::Ref(Whitespace());
  const Sequence member = {GrammarBuilder::Ref(AnyKey()), ws, b.Byte(':'), ws,
                           GrammarBuilder::Ref(AnyValue(depth + 1))};
  const RuleId members = b.Repeat(member, {ws, b.Byte(','), ws}, 1, -1);
  b.AddAlternative(object, Wrap('{', members, '}'));
  return object;
}

RuleId JsonRules::AnyArray(int depth) {
  const std::string key = fmt::format("json:array:{}", depth);
  RuleId array;
  if (!Define(key, fmt::format("array-{}", depth), &array)) return array;
  GrammarBuilder& b = builder_;
  if (depth >= options_.max_depth) return array;
  const Symbol ws = GrammarBuilder::Ref(Whitespace());
  const RuleId items =
      b.Repeat({GrammarBuilder::Ref(AnyValue(depth + 1))}, {ws, b.Byte(','), ws}, 1, -1);
  b.AddAlternative(array, Wrap('[', items, ']'));
  return array;
}

Sequence JsonRules::Literal(const Json& value) { return builder_.Literal(Text(value)); }

std::string JsonRules::Text(const Json& value) const {
  if (options_.notation == Notation::kJson || !(value.is_structured() || value.is_string())) {
    return value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  if (value.is_string()) {
    return std::string(kGemmaStringMarker) + value.get<std::string>() +
           std::string(kGemmaStringMarker);
  }
  std::string text(1, value.is_object() ? '{' : '[');
  if (value.is_array()) {
    for (const Json& item : value) text += (text.size() > 1 ? "," : "") + Text(item);
    return text + ']';
  }
  std::vector<std::string> names;
  for (const auto& [name, unused] : value.items()) names.push_back(name);
  for (size_t i : MemberOrder(names)) {
    text += (text.size() > 1 ? "," : "") + names[i] + ":" + Text(value.at(names[i]));
  }
  return text + '}';
}

}  // namespace shardlm::grammar
