// StopMatcher implementation: an Aho-Corasick automaton over the stop strings (see
// stop_matcher.h). Building it is linear in the stop strings' bytes (times their count, for
// the sibling lists); a push is linear in its bytes: every byte deepens the state by at
// most one and every failure step makes it shallower, so the failure steps of a whole
// stream are at most its length.
#include "engine/stop_matcher.h"

#include <algorithm>

#include "base/check.h"

namespace shardlm {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    SHARDLM_DCHECK(stop.size() <= kMaxStopStringBytes);
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
  if (stops_.empty()) return;
  nodes_.emplace_back();
  for (uint32_t i = 0; i < stops_.size(); ++i) {
    max_stop_bytes_ = std::max(max_stop_bytes_, stops_[i].size());
    Insert(i);
  }
  LinkFailures();
}

void StopMatcher::Insert(uint32_t stop_index) {
  const std::string& stop = stops_[stop_index];
  uint32_t node = 0;
  for (size_t i = 0; i < stop.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(stop[i]);
    uint32_t child = Child(node, byte);
    if (child == 0) {
      child = static_cast<uint32_t>(nodes_.size());
      Node made;
      made.depth = static_cast<uint32_t>(i + 1);
      made.prefix_of = stop_index;
      made.byte = byte;
      made.next_sibling = nodes_[node].first_child;
      nodes_.push_back(made);
      nodes_[node].first_child = child;
    }
    node = child;
  }
  // An equal stop string listed earlier keeps the match: it wins ties.
  if (nodes_[node].match_bytes == 0) {
    nodes_[node].match_bytes = nodes_[node].depth;
    nodes_[node].match_stop = stop_index;
  }
}

void StopMatcher::LinkFailures() {
  std::vector<uint32_t> order;  // breadth first; failures of the root's children: the root
  for (uint32_t c = nodes_[0].first_child; c != 0; c = nodes_[c].next_sibling) order.push_back(c);
  for (size_t head = 0; head < order.size(); ++head) {
    const uint32_t node = order[head];
    for (uint32_t c = nodes_[node].first_child; c != 0; c = nodes_[c].next_sibling) {
      Node& child = nodes_[c];
      child.fail = Next(nodes_[node].fail, child.byte);
      // A stop string ending here is longer than any that ends at the failure node.
      if (child.match_bytes == 0) {
        child.match_bytes = nodes_[child.fail].match_bytes;
        child.match_stop = nodes_[child.fail].match_stop;
      }
      order.push_back(c);
    }
  }
}

uint32_t StopMatcher::Child(uint32_t node, uint8_t byte) const {
  for (uint32_t c = nodes_[node].first_child; c != 0; c = nodes_[c].next_sibling) {
    if (nodes_[c].byte == byte) return c;
  }
  return 0;
}

uint32_t StopMatcher::Next(uint32_t node, uint8_t byte) const {
  for (;;) {
    if (const uint32_t child = Child(node, byte); child != 0) return child;
    if (node == 0) return 0;
    node = nodes_[node].fail;
  }
}

std::string_view StopMatcher::HeldText() const {
  const Node& node = nodes_[state_];
  return std::string_view(stops_[node.prefix_of]).substr(0, node.depth);
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  if (stops_.empty()) return std::string(text);
  // Offsets below count from the start of the held text, which is followed by `text`.
  const std::string_view held = HeldText();
  size_t best_start = std::string::npos;
  uint32_t best_stop = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    state_ = Next(state_, static_cast<uint8_t>(text[i]));
    const Node& node = nodes_[state_];
    const size_t end = held.size() + i + 1;
    if (node.match_bytes != 0) {
      // The longest match ending here starts first; later ones cannot start earlier.
      const size_t start = end - node.match_bytes;
      if (start < best_start || (start == best_start && node.match_stop < best_stop)) {
        best_start = start;
        best_stop = node.match_stop;
      }
    }
    // A match that ends later starts at or after end + 1 - max_stop_bytes_.
    if (best_start != std::string::npos && end + 1 > best_start + max_stop_bytes_) break;
  }
  // Released: everything before the match, or before what is held back from now on.
  const size_t release = best_start != std::string::npos
                             ? best_start
                             : held.size() + text.size() - nodes_[state_].depth;
  std::string out(held.substr(0, std::min(release, held.size())));
  if (release > held.size()) out.append(text.substr(0, release - held.size()));
  if (best_start != std::string::npos) {
    stopped_ = true;
    matched_ = stops_[best_stop];
    state_ = 0;
  }
  return out;
}

std::string StopMatcher::Flush() {
  if (stops_.empty()) return "";
  std::string out(HeldText());
  state_ = 0;
  return stopped_ ? std::string() : out;
}

}  // namespace shardlm
