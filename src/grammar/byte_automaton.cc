// ByteAutomaton: stack and state interning, the expansion of calls and returns, and the
// lazy transition table (see byte_automaton.h).
#include "grammar/byte_automaton.h"

#include <algorithm>

#include "base/check.h"

namespace shardlm::grammar {
namespace {

uint64_t PairKey(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

size_t ByteAutomaton::StacksHash::operator()(const std::vector<int32_t>& stacks) const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ stacks.size();
  for (int32_t id : stacks) {
    h ^= uint64_t(uint32_t(id)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return size_t(h);
}

ByteAutomaton::ByteAutomaton(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  SHARDLM_CHECK(grammar_ != nullptr);
  nodes_.push_back(StackNode{-1, -1, 0});  // kEmptyStack
  scratch_out_.clear();
  visited_.clear();
  for (int32_t start : grammar_->alternatives(grammar_->root())) Expand(start, kEmptyStack);
  // Build made the root productive, so at least one parse starts.
  SHARDLM_CHECK(!scratch_out_.empty());
  initial_ = InternState();
}

ByteAutomaton::StateId ByteAutomaton::Walk(StateId state, std::string_view bytes) {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = Next(state, uint8_t(c));
  }
  return state;
}

size_t ByteAutomaton::memory_bytes() const {
  size_t bytes = nodes_.size() * sizeof(StackNode) + rows_.size() * 256 * sizeof(StateId);
  for (const std::vector<int32_t>& stacks : states_) bytes += 2 * stacks.size() * sizeof(int32_t);
  // Hash map nodes: roughly a key, a value and two pointers each.
  bytes += node_ids_.size() * 32 + state_ids_.size() * 48;
  return bytes;
}

int32_t ByteAutomaton::InternStack(int32_t pos, int32_t parent) {
  auto [it, inserted] = node_ids_.emplace(PairKey(pos, parent), int32_t(nodes_.size()));
  if (!inserted) return it->second;
  const int32_t height = nodes_[size_t(parent)].height + 1;
  if (height > kMaxStackHeight) {
    node_ids_.erase(it);
    return kTooDeep;
  }
  nodes_.push_back(StackNode{pos, parent, height});
  return it->second;
}

void ByteAutomaton::Expand(int32_t pos, int32_t parent) {
  const Grammar& g = *grammar_;
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    auto [p, below] = work_.back();
    work_.pop_back();
    if (!visited_.insert(PairKey(p, below)).second) continue;
    const Grammar::Element& e = g.element(p);
    switch (e.kind) {
      case Grammar::Element::Kind::kBytes: {
        const int32_t top = InternStack(p, below);
        if (top != kTooDeep) scratch_out_.push_back(top);
        break;
      }
      case Grammar::Element::Kind::kEnd:
        if (below == kEmptyStack) {
          scratch_out_.push_back(kEmptyStack);
        } else {
          const StackNode& node = nodes_[size_t(below)];
          work_.emplace_back(node.pos, node.parent);
        }
        break;
      case Grammar::Element::Kind::kRule: {
        // A call as the last symbol returns straight to `below`: nothing to push.
        const bool tail = g.element(p + 1).kind == Grammar::Element::Kind::kEnd;
        const int32_t continuation = tail ? below : InternStack(p + 1, below);
        if (continuation == kTooDeep) break;
        for (int32_t start : g.alternatives(e.value)) work_.emplace_back(start, continuation);
        break;
      }
    }
  }
}

ByteAutomaton::StateId ByteAutomaton::InternState() {
  std::sort(scratch_out_.begin(), scratch_out_.end());
  scratch_out_.erase(std::unique(scratch_out_.begin(), scratch_out_.end()), scratch_out_.end());
  auto it = state_ids_.find(scratch_out_);
  if (it != state_ids_.end()) return it->second;
  const StateId id = StateId(states_.size());
  states_.push_back(scratch_out_);
  state_ids_.emplace(scratch_out_, id);
  auto row = std::make_unique<StateId[]>(256);
  std::fill(row.get(), row.get() + 256, kUnknown);
  rows_.push_back(std::move(row));
  return id;
}

ByteAutomaton::StateId ByteAutomaton::Compute(StateId state, uint8_t byte) {
  const Grammar& g = *grammar_;
  scratch_out_.clear();
  visited_.clear();
  // states_ may grow while we expand: copy the stacks we walk.
  const std::vector<int32_t> stacks = states_[size_t(state)];
  for (int32_t stack : stacks) {
    if (stack == kEmptyStack) continue;
    const StackNode node = nodes_[size_t(stack)];
    const Grammar::Element& e = g.element(node.pos);
    if (g.byte_set(e.value).Has(byte)) Expand(node.pos + 1, node.parent);
  }
  if (scratch_out_.empty()) return kDead;
  return InternState();
}

}  // namespace shardlm::grammar
