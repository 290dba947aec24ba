// ByteAutomaton: a grammar (grammar.h) matched one byte at a time, as a deterministic
// automaton built lazily: each state is the set of every parse still alive after the bytes
// so far, and each (state, byte) transition is computed the first time it is asked for,
// then read from a table.
//
// A parse is a stack of grammar positions: the top is the byte symbol expected next, the
// ones below are where to continue once the rule above returns. Stacks are shared and
// interned (a node is {position, parent}), a state is the sorted set of its stacks'
// ids, interned too, so equal states get equal ids: what lets masks be cached per state
// (token_automaton.h). A call whose continuation is the end of its alternative pushes
// nothing (a tail call), so repetition written as right recursion (a JSON string's
// characters, an array's items) loops between the same few states instead of deepening
// the stack.
//
// Goals: after the first visit, a transition is one table read; memory grows with the
// states visited, never with the length of the text.
// Non-goals: minimisation, eviction of states (a grammar's automaton lives as long as the
// matchers that use it; the grammar bounds its own nesting, so its states are finite).
//
// Thread safety: not thread-safe, not even for reads (Next fills the table): one thread
// at a time. Lifetime: holds the grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace shardlm::grammar {

class ByteAutomaton {
 public:
  using StateId = int32_t;
  static constexpr StateId kDead = -1;
  // The deepest a parse stack may grow. The grammars built here bound their own nesting
  // (json_schema.h's depth limit) far below this; it guards a grammar built by hand that
  // recurses on the right without end, whose states would otherwise never repeat.
  static constexpr int kMaxStackHeight = 1024;

  explicit ByteAutomaton(std::shared_ptr<const Grammar> grammar);
  ByteAutomaton(const ByteAutomaton&) = delete;
  ByteAutomaton& operator=(const ByteAutomaton&) = delete;

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  StateId initial() const { return initial_; }

  // The state after `byte`, or kDead when no parse accepts it.
  StateId Next(StateId state, uint8_t byte) {
    const StateId known = rows_[size_t(state)][byte];
    if (known != kUnknown) return known;
    const StateId next = Compute(state, byte);
    rows_[size_t(state)][byte] = next;  // Compute may have added rows: index again
    return next;
  }
  // The state after every byte of `bytes`, or kDead.
  StateId Walk(StateId state, std::string_view bytes);
  // The text so far is a complete sentence of the grammar.
  bool CanEnd(StateId state) const {
    const std::vector<int32_t>& stacks = states_[size_t(state)];
    return !stacks.empty() && stacks[0] == kEmptyStack;
  }
  // Complete, and no byte may follow.
  bool IsComplete(StateId state) const {
    const std::vector<int32_t>& stacks = states_[size_t(state)];
    return stacks.size() == 1 && stacks[0] == kEmptyStack;
  }

  size_t n_states() const { return states_.size(); }
  size_t memory_bytes() const;

 private:
  static constexpr StateId kUnknown = -2;
  static constexpr int32_t kEmptyStack = 0;  // the finished parse; node 0 is its sentinel
  static constexpr int32_t kTooDeep = -1;
  struct StackNode {
    int32_t pos;     // top: a byte element; below: the position to continue at
    int32_t parent;  // kEmptyStack at the bottom
    int32_t height;
  };
  struct StacksHash {
    size_t operator()(const std::vector<int32_t>& stacks) const;
  };

  StateId Compute(StateId state, uint8_t byte);
  // Adds to scratch_out_ every stack that continues at `pos` over `parent`, expanding
  // rule calls and returns until each stack's top is a byte element (or the stack is done).
  void Expand(int32_t pos, int32_t parent);
  int32_t InternStack(int32_t pos, int32_t parent);
  StateId InternState();

  std::shared_ptr<const Grammar> grammar_;
  std::vector<StackNode> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;  // (pos, parent) → node
  std::vector<std::vector<int32_t>> states_;        // [state] → sorted stack ids
  std::unordered_map<std::vector<int32_t>, StateId, StacksHash> state_ids_;
  std::vector<std::unique_ptr<StateId[]>> rows_;  // [state][256] transitions, kUnknown
  StateId initial_ = kDead;
  // Scratch of Compute and Expand.
  std::vector<int32_t> scratch_out_;
  std::vector<std::pair<int32_t, int32_t>> work_;
  std::unordered_set<uint64_t> visited_;
};

}  // namespace shardlm::grammar
