// GrammarBuilder and Grammar: rule collection, the checks of Build (productive rules,
// reachability, left recursion), flattening, fingerprint and dump (see grammar.h).
#include "grammar/grammar.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/check.h"

namespace shardlm::grammar {
namespace {

// FNV-1a over 64-bit words, then a final mix: the fingerprint only has to make distinct
// grammars unlikely to collide (SameAs settles a collision), not resist an adversary.
class Hasher {
 public:
  void Add(uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (value >> (8 * i)) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  }
  uint64_t Finish() const {
    uint64_t z = hash_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

std::string ByteSetKey(const ByteSet& set) {
  std::string key(sizeof(uint64_t) * 4, '\0');
  std::memcpy(key.data(), set.words().data(), key.size());
  return key;
}

std::string PrintableByte(int byte) {
  if (byte == '\\' || byte == ']' || byte == '[' || byte == '-' || byte == '^' || byte == '"') {
    return std::string("\\") + char(byte);
  }
  if (byte >= 0x21 && byte < 0x7f) return std::string(1, char(byte));
  return fmt::format("\\x{:02x}", byte);
}

std::string ByteSetText(const ByteSet& set) {
  if (set.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (set.Has(uint8_t(b))) return "\"" + PrintableByte(b) + "\"";
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set.Has(uint8_t(b))) {
      ++b;
      continue;
    }
    int end = b;
    while (end + 1 < 256 && set.Has(uint8_t(end + 1))) ++end;
    out += PrintableByte(b);
    if (end > b) out += "-" + PrintableByte(end);
    b = end + 1;
  }
  return out + "]";
}

}  // namespace

ByteSet ByteSet::Chars(std::string_view chars) {
  ByteSet set;
  for (char c : chars) set.Add(uint8_t(c));
  return set;
}

ByteSet& ByteSet::AddRange(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) Add(uint8_t(b));
  return *this;
}

int ByteSet::count() const {
  int n = 0;
  for (uint64_t word : words_) n += std::popcount(word);
  return n;
}

RuleId GrammarBuilder::AddRule(std::string_view name) {
  // The n-th rule of a name is "name-n" (from 2): names stay unique in dumps and errors.
  int& count = name_counts_[std::string(name)];
  ++count;
  std::string unique = count == 1 ? std::string(name) : fmt::format("{}-{}", name, count);
  const RuleId id = RuleId(rules_.size());
  rules_.push_back(Rule{std::move(unique), {}});
  return id;
}

void GrammarBuilder::AddAlternative(RuleId rule, Sequence sequence) {
  SHARDLM_CHECK(rule >= 0 && rule < n_rules());
  n_symbols_ += sequence.size() + 1;
  rules_[size_t(rule)].alternatives.push_back(std::move(sequence));
}

std::optional<RuleId> GrammarBuilder::Find(std::string_view key) const {
  auto it = memo_.find(std::string(key));
  if (it == memo_.end()) return std::nullopt;
  return it->second;
}

Symbol GrammarBuilder::Bytes(const ByteSet& set) {
  SHARDLM_CHECK(!set.empty());
  auto [it, inserted] = set_index_.emplace(ByteSetKey(set), int32_t(byte_sets_.size()));
  if (inserted) byte_sets_.push_back(set);
  return Symbol{Symbol::Kind::kBytes, it->second};
}

Sequence GrammarBuilder::Literal(std::string_view text) {
  Sequence out;
  out.reserve(text.size());
  for (char c : text) out.push_back(Byte(uint8_t(c)));
  return out;
}

RuleId GrammarBuilder::Repeat(const Sequence& item, const Sequence& separator, int min, int max) {
  SHARDLM_CHECK(min >= 0 && (max < 0 || max >= min));
  std::string key = fmt::format("repeat {} {}:", min, max);
  for (const Symbol& s : item) key += fmt::format(" {}{}", int(s.kind), s.index);
  key += " /";
  for (const Symbol& s : separator) key += fmt::format(" {}{}", int(s.kind), s.index);
  if (std::optional<RuleId> known = Find(key)) return *known;

  const RuleId head = AddRule("repeat");
  Remember(key, head);
  if (min == 0) AddAlternative(head, {});
  if (max == 0) return head;
  // tail[k]: what may follow once k items are out (k = 1 .. last); with no bound, every
  // count from min on is the same state, so the last tail loops on itself.
  const int last = max < 0 ? std::max(min, 1) : max;
  std::vector<RuleId> tails(size_t(last) + 1);
  for (int k = 1; k <= last; ++k) tails[size_t(k)] = AddRule("repeat-tail");
  for (int k = 1; k <= last; ++k) {
    if (k >= min) AddAlternative(tails[size_t(k)], {});
    if (max >= 0 && k == max) continue;
    Sequence more = separator;
    more.insert(more.end(), item.begin(), item.end());
    more.push_back(Ref(tails[size_t(std::min(k + 1, last))]));
    AddAlternative(tails[size_t(k)], std::move(more));
  }
  Sequence first = item;
  first.push_back(Ref(tails[1]));
  AddAlternative(head, std::move(first));
  return head;
}

// One rule per number of trigger bytes matched so far (a KMP automaton): each byte moves
// to the longest prefix of the trigger that ends the text, and the byte that completes the
// trigger moves on to `then`.
RuleId GrammarBuilder::TextUntil(std::string_view trigger, const Sequence& then) {
  SHARDLM_CHECK(!trigger.empty());
  const size_t n = trigger.size();
  std::vector<size_t> fail(n + 1, 0);  // fail[k]: longest proper border of trigger[0, k)
  for (size_t k = 2; k <= n; ++k) {
    size_t j = fail[k - 1];
    while (j > 0 && trigger[j] != trigger[k - 1]) j = fail[j];
    fail[k] = trigger[j] == trigger[k - 1] ? j + 1 : 0;
  }
  auto step = [&](size_t k, uint8_t byte) {
    while (k > 0 && uint8_t(trigger[k]) != byte) k = fail[k];
    return uint8_t(trigger[k]) == byte ? k + 1 : 0;
  };
  std::vector<RuleId> matched(n);
  for (RuleId& rule : matched) rule = AddRule("text-until");
  for (size_t k = 0; k < n; ++k) {
    std::vector<ByteSet> by_target(n);
    for (int b = 0; b < 256; ++b) {
      const size_t next = step(k, uint8_t(b));
      if (next < n) by_target[next].Add(uint8_t(b));
    }
    for (size_t t = 0; t < n; ++t) {
      if (!by_target[t].empty()) AddAlternative(matched[k], {Bytes(by_target[t]), Ref(matched[t])});
    }
    if (step(k, uint8_t(trigger[n - 1])) == n) {
      Sequence last = {Byte(uint8_t(trigger[n - 1]))};
      last.insert(last.end(), then.begin(), then.end());
      AddAlternative(matched[k], std::move(last));
    }
  }
  return matched[0];
}

// A rule is productive when one of its alternatives derives a finite byte string: only
// byte symbols and productive rules.
std::vector<bool> GrammarBuilder::ProductiveRules() const {
  std::vector<bool> productive(rules_.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (productive[r]) continue;
      for (const Sequence& alt : rules_[r].alternatives) {
        const bool ok = std::all_of(alt.begin(), alt.end(), [&](const Symbol& s) {
          return s.kind == Symbol::Kind::kBytes || productive[size_t(s.index)];
        });
        if (ok) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  return productive;
}

Result<Grammar> GrammarBuilder::Build(RuleId root) const {
  if (root < 0 || root >= n_rules()) return InvalidArgument("grammar: no root rule {}", root);
  if (too_big()) {
    return InvalidArgument("grammar: more than {} symbols (the constraint is too large)",
                           kMaxGrammarSymbols);
  }
  for (const Rule& rule : rules_) {
    for (const Sequence& alt : rule.alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kRule && (s.index < 0 || s.index >= n_rules())) {
          return InvalidArgument("grammar: rule '{}' refers to rule {}, which does not exist",
                                 rule.name, s.index);
        }
      }
    }
  }
  const std::vector<bool> productive = ProductiveRules();
  if (!productive[size_t(root)]) {
    return InvalidArgument("grammar: rule '{}' can never finish (every way through it recurses)",
                           rules_[size_t(root)].name);
  }
  auto usable = [&](const Sequence& alt) {
    return std::all_of(alt.begin(), alt.end(), [&](const Symbol& s) {
      return s.kind == Symbol::Kind::kBytes || productive[size_t(s.index)];
    });
  };

  // Reachable rules over usable alternatives, numbered in the order found (root first).
  std::vector<RuleId> new_id(rules_.size(), -1);
  std::vector<RuleId> order = {root};
  new_id[size_t(root)] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    for (const Sequence& alt : rules_[size_t(order[i])].alternatives) {
      if (!usable(alt)) continue;
      for (const Symbol& s : alt) {
        if (s.kind != Symbol::Kind::kRule || new_id[size_t(s.index)] >= 0) continue;
        new_id[size_t(s.index)] = RuleId(order.size());
        order.push_back(s.index);
      }
    }
  }

  // Nullable rules (derive the empty string), then left recursion: a rule that can reach
  // itself through rules each called after only nullable symbols.
  std::vector<bool> nullable(rules_.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (RuleId r : order) {
      if (nullable[size_t(r)]) continue;
      for (const Sequence& alt : rules_[size_t(r)].alternatives) {
        if (!usable(alt)) continue;
        const bool empty = std::all_of(alt.begin(), alt.end(), [&](const Symbol& s) {
          return s.kind == Symbol::Kind::kRule && nullable[size_t(s.index)];
        });
        if (empty) {
          nullable[size_t(r)] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<RuleId>> left_calls(rules_.size());
  for (RuleId r : order) {
    for (const Sequence& alt : rules_[size_t(r)].alternatives) {
      if (!usable(alt)) continue;
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kBytes) break;
        left_calls[size_t(r)].push_back(s.index);
        if (!nullable[size_t(s.index)]) break;
      }
    }
  }
  // Iterative DFS with colours: 1 on the path, 2 done.
  std::vector<uint8_t> colour(rules_.size(), 0);
  for (RuleId start : order) {
    if (colour[size_t(start)]) continue;
    std::vector<std::pair<RuleId, size_t>> path = {{start, 0}};
    colour[size_t(start)] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left_calls[size_t(r)].size()) {
        colour[size_t(r)] = 2;
        path.pop_back();
        continue;
      }
      const RuleId callee = left_calls[size_t(r)][next++];
      if (colour[size_t(callee)] == 1) {
        return InvalidArgument("grammar: rule '{}' is left-recursive", rules_[size_t(callee)].name);
      }
      if (colour[size_t(callee)] == 0) {
        colour[size_t(callee)] = 1;
        path.push_back({callee, 0});
      }
    }
  }

  Grammar g;
  g.root_ = 0;
  std::vector<int32_t> new_set(byte_sets_.size(), -1);
  g.rule_alts_.push_back(0);
  for (RuleId r : order) {
    g.names_.push_back(rules_[size_t(r)].name);
    for (const Sequence& alt : rules_[size_t(r)].alternatives) {
      if (!usable(alt)) continue;
      g.alt_starts_.push_back(int32_t(g.elements_.size()));
      for (const Symbol& s : alt) {
        Grammar::Element e;
        if (s.kind == Symbol::Kind::kRule) {
          e = {Grammar::Element::Kind::kRule, new_id[size_t(s.index)]};
        } else {
          int32_t& index = new_set[size_t(s.index)];
          if (index < 0) {
            index = int32_t(g.byte_sets_.size());
            g.byte_sets_.push_back(byte_sets_[size_t(s.index)]);
          }
          e = {Grammar::Element::Kind::kBytes, index};
        }
        g.elements_.push_back(e);
      }
      g.elements_.push_back({Grammar::Element::Kind::kEnd, 0});
    }
    g.rule_alts_.push_back(int32_t(g.alt_starts_.size()));
  }

  Hasher hasher;
  for (int32_t offset : g.rule_alts_) hasher.Add(uint64_t(offset));
  for (int32_t start : g.alt_starts_) hasher.Add(uint64_t(start));
  for (const Grammar::Element& e : g.elements_) {
    hasher.Add((uint64_t(e.kind) << 32) | uint32_t(e.value));
  }
  for (const ByteSet& set : g.byte_sets_) {
    for (uint64_t word : set.words()) hasher.Add(word);
  }
  g.fingerprint_ = hasher.Finish();
  return g;
}

bool Grammar::SameAs(const Grammar& other) const {
  auto same_elements = [](const std::vector<Element>& a, const std::vector<Element>& b) {
    return std::equal(
        a.begin(), a.end(), b.begin(), b.end(),
        [](const Element& x, const Element& y) { return x.kind == y.kind && x.value == y.value; });
  };
  return fingerprint_ == other.fingerprint_ && root_ == other.root_ &&
         rule_alts_ == other.rule_alts_ && alt_starts_ == other.alt_starts_ &&
         byte_sets_ == other.byte_sets_ && same_elements(elements_, other.elements_);
}

std::string Grammar::ToString() const {
  std::string out;
  for (RuleId r = 0; r < n_rules(); ++r) {
    out += names_[size_t(r)] + " ::=";
    bool first = true;
    for (int32_t pos : alternatives(r)) {
      out += first ? " " : " | ";
      first = false;
      if (elements_[size_t(pos)].kind == Element::Kind::kEnd) out += "\"\"";
      for (bool space = false; elements_[size_t(pos)].kind != Element::Kind::kEnd; ++pos) {
        const Element& e = elements_[size_t(pos)];
        if (space) out += " ";
        space = true;
        out += e.kind == Element::Kind::kRule ? names_[size_t(e.value)]
                                              : ByteSetText(byte_sets_[size_t(e.value)]);
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace shardlm::grammar
